"""`gpuobs query RECORDING "SQL"`: DuckDB SQL over the recording's Parquet tables
(docs/parquet-schema.md), each a view named as its table (launches, blocks,
kernels, ...) with the pid and gpu partition columns.

The tables are exported once into a cache beside the recording (RECORDING.parquet/)
and reused while the recording's size and modification time are those it was
written from; where that directory cannot be written, into a temporary one for
this query alone."""

from __future__ import annotations

import csv
import datetime
import decimal
import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import ExportError, GpuobsError
from . import tables

SOURCE_STAMP = "gpuobs-query-source.json"  # what the cache was written from
FORMATS = ("table", "csv", "json")


@dataclass
class Result:
    columns: list
    rows: list  # tuples, as DuckDB returns them


def cache_dir(recording: Path) -> Path:
    return recording.with_name(recording.name + ".parquet")


def _source(recording: Path) -> dict:
    st = recording.stat()
    return {
        "recording": str(recording.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "gpuobs_parquet_schema_version": tables.SCHEMA_VERSION,
    }


def _current(cache: Path, source: dict) -> bool:
    try:
        return json.loads((cache / SOURCE_STAMP).read_text()) == source
    except (OSError, ValueError):
        return False


def ensure_tables(rec_path: Path, cache: Path, load, refresh: bool = False, say=lambda _msg: None) -> Path:
    """The Parquet tables of `rec_path` under `cache`, exported unless current.
    `load(path)` reads the recording (cli._open_for_analysis: its errors are the
    command's; a recording read window by window is closed after)."""
    from .parquet import write_parquet

    source = _source(rec_path)
    if not refresh and _current(cache, source):
        return cache
    say(f"exporting {rec_path} to {cache}/ for SQL (reused while the recording is unchanged)")
    recording = load(rec_path)
    try:
        write_parquet([recording], cache, force=cache.exists())
    finally:
        if hasattr(recording, "close"):
            recording.close()
    (cache / SOURCE_STAMP).write_text(json.dumps(source, indent=2) + "\n")
    return cache


def connect(folder: Path):
    """A DuckDB connection with one view per table of the export in `folder`."""
    import duckdb

    con = duckdb.connect()
    for table in tables.TABLES:
        depth = "*/*/*.parquet" if tables.partitioned_by_gpu(table) else "*/*.parquet"
        pattern = str(folder / table / depth).replace("'", "''")
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{pattern}', hive_partitioning = true)")
    return con


def run_sql(folder: Path, sql: str) -> Result:
    """Raises QueryError with DuckDB's message when the SQL fails."""
    import duckdb

    con = connect(folder)
    try:
        rel = con.sql(sql)
        if rel is None:  # a statement without a result (SET, CREATE ...)
            return Result([], [])
        return Result(list(rel.columns), rel.fetchall())
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise QueryError(first) from None
    finally:
        con.close()


class QueryError(GpuobsError):
    pass


def _plain(value):
    """A value as JSON has it: DuckDB's decimals, times and blobs made plain."""
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (datetime.date, datetime.time, datetime.datetime, datetime.timedelta)):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def as_json(result: Result) -> str:
    return json.dumps([dict(zip(result.columns, map(_plain, row))) for row in result.rows], indent=2)


def as_csv(result: Result) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([["" if v is None else _plain(v) for v in row] for row in result.rows])
    return out.getvalue()


def as_text(result: Result) -> str:
    """Aligned columns: numbers right, text left, NULL as '-'."""
    cells = [["-" if v is None else str(_plain(v)) for v in row] for row in result.rows]
    numeric = [
        all(isinstance(row[i], (int, float, decimal.Decimal)) or row[i] is None for row in result.rows)
        for i in range(len(result.columns))
    ]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(result.columns)]

    def line(values):
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    lines = [line(result.columns), line(["-" * w for w in widths])] + [line(r) for r in cells]
    lines.append(f"({len(result.rows):,} row{'s' if len(result.rows) != 1 else ''})")
    return "\n".join(lines)


def command(recording: Path, sql: str, fmt: str, cache: Optional[Path], refresh: bool) -> None:
    """`gpuobs query`'s body (cli.py declares the options)."""
    from .. import cli

    if fmt not in FORMATS:
        cli._fail(f"--format {fmt!r} is not table, csv or json")
    try:
        import duckdb  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        cli._fail("query needs duckdb and pyarrow: pip install 'gpuobs[query]'")
    cli._check_recording_path(recording)
    if not sql.strip():
        cli._fail('no SQL given: gpuobs query RECORDING "SELECT ... FROM launches"')

    def _note(text):
        cli.err.print(text, markup=False, highlight=False)

    temporary = None
    folder = cache or cache_dir(recording)
    if cache is None and not os.access(folder.parent, os.W_OK):
        temporary = Path(tempfile.mkdtemp(prefix="gpuobs-query-"))
        folder = temporary / "tables.parquet"
        cli._warn(f"{recording.parent} is not writable: the tables are exported for this query only")
    try:
        try:
            ensure_tables(recording, folder, lambda p: cli._open_for_analysis(p, False), refresh, _note)
        except ExportError as exc:
            cli._fail(str(exc))
        try:
            result = run_sql(folder, sql)
        except QueryError as exc:
            names = ", ".join(tables.TABLES)
            cli._fail(f"query: {exc} (tables: {names}; columns: docs/parquet-schema.md)")
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
    if fmt == "json":
        cli._say(as_json(result))
    elif fmt == "csv":
        cli._say(as_csv(result).rstrip("\n"))
    else:
        cli._say(as_text(result))
