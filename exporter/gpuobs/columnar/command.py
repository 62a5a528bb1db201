"""`gpuobs export --format parquet`: the command's body (cli.py registers the option)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import List, Optional

from ..errors import ExportError, SelectionError
from ..selection import Criteria


def export_parquet(
    recordings: List[Path],
    output: Optional[Path],
    force: bool,
    salvage: bool,
    kernels: Optional[str],
    launches: Optional[str],
    time_window: Optional[str],
    trace_only: List[str],
) -> None:
    """Write the recordings' tables under -o DIR (default ./STEM.parquet), then say what was written."""
    from .. import cli

    try:
        import pyarrow  # noqa: F401
    except ImportError:
        cli._fail("--format parquet needs pyarrow: pip install 'gpuobs[parquet]'")
    if trace_only:
        cli._fail(f"{', '.join(trace_only)}: for Perfetto traces only, not --format parquet")
    try:
        criteria = Criteria.parse(kernels=kernels, launches=launches, time=time_window)
    except SelectionError as exc:
        cli._fail(str(exc))
    paths = cli._recordings_or_default(recordings)
    cli._refuse_duplicates(paths)
    output = output or Path(paths[0].stem + ".parquet")
    if output.suffix in cli.TRACE_SUFFIXES:
        cli._fail(f"{output} names a trace: a Parquet export is a directory (e.g. -o {output.stem}.parquet)")
    from .parquet import write_parquet

    started = time.monotonic()
    with contextlib.ExitStack() as stack:  # windowed recordings (their events read as written) closed after
        loaded = [stack.enter_context(cli._load_for_analysis(p, salvage)) for p in paths]
        try:
            with cli._progress() as progress:
                summary = write_parquet(loaded, output, criteria, force=force, progress=progress)
        except ExportError as exc:
            cli._fail(str(exc))
    rows = ", ".join(f"{n:,} {t}" for t, n in summary.rows.items() if n and t not in ("recordings", "clock"))
    cli._say(
        f"{output}/: {summary.bytes / 1e6:.1f} MB in {summary.files} Parquet files ({rows}) "
        f"in {time.monotonic() - started:.1f} s"
    )
    cli._say(f"  query it: duckdb -c \"SELECT * FROM read_parquet('{output}/launches/*/*/*.parquet') LIMIT 5\"")
    cli._say("  tables, columns and example queries: docs/parquet-schema.md")
