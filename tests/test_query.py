"""`gpuobs query`: real DuckDB SQL over the recording's Parquet tables gives `gpuobs
stats`'s per-kernel numbers; the cache beside the recording is reused while the
recording is unchanged and rebuilt when it changes; bad SQL is a one-line error."""

import csv
import io
import json
import os
import shutil

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

from cli_helpers import DATA, gpuobs  # noqa: E402
from test_parquet import KERNEL_SUMMARY_SQL  # noqa: E402

BLOCK_TRACE = DATA / "decode_block_trace.gpuobs"
# docs/parquet-schema.md's per-kernel summary, over the view named as its table
SUMMARY = KERNEL_SUMMARY_SQL.replace("read_parquet('{d}/launches/*/*/*.parquet')", "launches")


@pytest.fixture
def recording(tmp_path):
    path = tmp_path / "decode.gpuobs"
    shutil.copy(BLOCK_TRACE, path)
    return path


def _query(rec, sql, *args):
    r = gpuobs("query", rec, sql, *args)
    assert r.returncode == 0, r.stderr
    return r


def _stats_kernel_times(path):
    r = gpuobs("stats", path, "--report", "kernels", "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["kernel_times"]["rows"]
    return [{("name" if k == "kernel" else k): v for k, v in row.items()} for row in rows]


def test_sql_per_kernel_summary_is_stats(recording):
    got = json.loads(_query(recording, SUMMARY, "--format", "json").stdout)
    expected = _stats_kernel_times(recording)
    assert len(expected) == 31
    assert got == expected


def test_blocks_table_counts_match_stats(recording):
    sql = "SELECT gpu AS device, kernel, count(*) AS blocks_recorded, count(DISTINCT sm) AS sms FROM blocks "
    sql += "WHERE launch_id IS NOT NULL GROUP BY ALL"
    got = {r["kernel"]: r for r in json.loads(_query(recording, sql, "--format", "json").stdout)}
    r = gpuobs("stats", recording, "--report", "blocks", "--format", "json")
    rows = json.loads(r.stdout)["blocks"]["rows"]
    assert {k: (v["blocks_recorded"], v["sms"]) for k, v in got.items()} == {
        row["kernel"]: (row["blocks_recorded"], row["sms"]) for row in rows if row["blocks_recorded"]
    }


def test_csv_and_table_show_the_same_rows(recording):
    sql = "SELECT launch_id, kernel, span_ns FROM launches ORDER BY launch_id LIMIT 3"
    as_json = json.loads(_query(recording, sql, "--format", "json").stdout)
    rows = list(csv.DictReader(io.StringIO(_query(recording, sql, "--format", "csv").stdout)))
    assert [{k: str(v) for k, v in r.items()} for r in as_json] == rows
    text = _query(recording, sql).stdout.splitlines()
    assert text[0].split() == ["launch_id", "kernel", "span_ns"]
    assert text[-1] == "(3 rows)"
    assert str(as_json[0]["span_ns"]) in text[2]


def test_cache_is_reused_until_the_recording_changes(recording, tmp_path):
    cache = tmp_path / "decode.gpuobs.parquet"
    first = _query(recording, "SELECT count(*) AS n FROM launches", "--format", "json")
    assert "exporting" in first.stderr and cache.is_dir()
    assert json.loads(first.stdout)[0]["n"] > 0
    again = _query(recording, "SELECT count(*) AS n FROM launches", "--format", "json")
    assert "exporting" not in again.stderr
    # another recording under the same name: the stale tables are not used
    shutil.copy(DATA / "decode_mem_sampled.gpuobs", recording)
    os.utime(recording, ns=(1, 1))
    changed = _query(
        recording, "SELECT count(*) AS n, any_value(r.mode) AS mode FROM launches, recordings r", "--format", "json"
    )
    assert "exporting" in changed.stderr
    assert json.loads(changed.stdout)[0]["mode"] == "mem_sampled"


def test_refresh_exports_the_tables_again(recording, tmp_path):
    cache = tmp_path / "decode.gpuobs.parquet"
    _query(recording, "SELECT 1 AS x")
    stamp = {p: p.stat().st_mtime_ns for p in cache.rglob("*.parquet")}
    assert stamp and "exporting" not in _query(recording, "SELECT 1 AS x").stderr
    again = _query(recording, "SELECT count(*) AS n FROM launches", "--refresh", "--format", "json")
    assert "exporting" in again.stderr and json.loads(again.stdout)[0]["n"] > 0
    assert any(p.stat().st_mtime_ns != t for p, t in stamp.items() if p.exists()) or set(stamp) != set(
        cache.rglob("*.parquet")
    )


def test_bad_sql_is_one_line(recording):
    r = gpuobs("query", recording, "SELECT nope FROM launches")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("gpuobs: query: ") and "nope" in lines[-1] and "tables: recordings" in lines[-1]
    r = gpuobs("query", recording, "SELECT * FROM no_such_table")
    assert r.returncode == 2 and "no_such_table" in r.stderr


def test_not_a_recording(tmp_path):
    bad = tmp_path / "x.gpuobs"
    bad.write_bytes(b"not a recording at all")
    r = gpuobs("query", bad, "SELECT 1")
    assert r.returncode == 2 and "not a gpuobs recording" in r.stderr
    assert not (tmp_path / "x.gpuobs.parquet").exists()
