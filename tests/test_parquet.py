"""`gpuobs export --format parquet`: real DuckDB SQL over the files gives `gpuobs stats`'s
per-kernel numbers, the documented schema is the written one, and selections keep
what the Perfetto export keeps."""

import json
import re

import pytest

pa = pytest.importorskip("pyarrow")
duckdb = pytest.importorskip("duckdb")
pq = pytest.importorskip("pyarrow.parquet")

from cli_helpers import DATA, ROOT, gpuobs  # noqa: E402

from gpuobs.columnar import tables  # noqa: E402

BLOCK_TRACE = DATA / "decode_block_trace.gpuobs"
MEM_SAMPLED = DATA / "decode_mem_sampled.gpuobs"
API_TRACE = DATA / "side_by_side_api_trace.gpuobs"

# The per-kernel time summary, as docs/parquet-schema.md shows it (DuckDB's median is
# interpolated and stddev_samp is numpy's ddof=1, as `stats` computes them).
KERNEL_SUMMARY_SQL = """
WITH spans AS (SELECT kernel, span_ns FROM read_parquet('{d}/launches/*/*/*.parquet') WHERE blocks_recorded > 0)
SELECT kernel AS name,
       round(100.0 * sum(span_ns) / (SELECT sum(span_ns) FROM spans), 2) AS time_pct,
       sum(span_ns) AS total_ns, count(*) AS instances,
       round(avg(span_ns), 1) AS avg_ns, round(median(span_ns), 1) AS med_ns,
       min(span_ns) AS min_ns, max(span_ns) AS max_ns,
       coalesce(round(stddev_samp(span_ns), 1), 0.0) AS stddev_ns
FROM spans GROUP BY kernel ORDER BY total_ns DESC, name
"""

# The same spans from the block records alone: a launch runs from its first block's
# start to its last block's end; an end a later replay may have stamped counts from its start.
SPANS_FROM_BLOCKS_SQL = """
WITH per_launch AS (
  SELECT launch_id, any_value(kernel) AS kernel,
         max(CASE WHEN end_kind = 'unconfirmed' THEN start_ns ELSE end_ns END) - min(start_ns) AS span_ns
  FROM read_parquet('{d}/blocks/*/*/*.parquet') WHERE launch_id IS NOT NULL GROUP BY launch_id)
SELECT kernel AS name, sum(span_ns) AS total_ns, count(*) AS instances, min(span_ns) AS min_ns,
       max(span_ns) AS max_ns
FROM per_launch GROUP BY kernel ORDER BY total_ns DESC, name
"""

BLOCKS_REPORT_SQL = """
WITH b AS (SELECT * FROM read_parquet('{d}/blocks/*/*/*.parquet', hive_partitioning = true)),
     l AS (SELECT * FROM read_parquet('{d}/launches/*/*/*.parquet', hive_partitioning = true)),
     per_kernel AS (
       SELECT gpu, kernel, count(*) AS launches, sum(grid_blocks) AS blocks, sum(blocks_recorded) AS blocks_recorded,
              sum(CASE WHEN blocks_recorded > 0 THEN greatest(grid_blocks - blocks_recorded, 0) ELSE 0 END)
                AS blocks_dropped,
              sum(memory_samples) AS memory_events
       FROM l GROUP BY gpu, kernel),
     durations AS (
       SELECT gpu, kernel, count(DISTINCT sm) AS sms,
              quantile_cont(end_ns - start_ns, 0.5) AS p50, quantile_cont(end_ns - start_ns, 0.9) AS p90,
              quantile_cont(end_ns - start_ns, 0.99) AS p99
       FROM b WHERE launch_id IS NOT NULL GROUP BY gpu, kernel)
SELECT k.gpu AS device, k.kernel, launches, blocks, blocks_recorded, coalesce(sms, 0) AS sms, memory_events,
       blocks_dropped, floor(p50)::BIGINT AS block_ns_p50, floor(p90)::BIGINT AS block_ns_p90,
       floor(p99)::BIGINT AS block_ns_p99
FROM per_kernel k LEFT JOIN durations d USING (gpu, kernel)
"""


def _export(recordings, out, *args):
    r = gpuobs("export", *recordings, "--format", "parquet", "-o", out, *args)
    assert r.returncode == 0, r.stderr
    return r


def _stats(path, report):
    r = gpuobs("stats", path, "--report", report, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _one(sql):
    """The first row of a query (DuckDB 2 relations have no fetchone)."""
    return duckdb.sql(sql).fetchall()[0]


def _rows(sql, d):
    rel = duckdb.sql(sql.format(d=d))
    return [dict(zip(rel.columns, row)) for row in rel.fetchall()]


@pytest.fixture(scope="module")
def block_trace_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("pq") / "decode.parquet"
    _export([BLOCK_TRACE], out)
    return out


def test_duckdb_kernel_time_summary_is_stats(block_trace_dir):
    rows = _stats(BLOCK_TRACE, "kernels")["kernel_times"]["rows"]
    expected = [{("name" if k == "kernel" else k): v for k, v in r.items()} for r in rows]  # stats keys it "kernel"
    got = _rows(KERNEL_SUMMARY_SQL, block_trace_dir)
    assert len(expected) == 31
    assert got == expected


def test_duckdb_spans_from_block_records_are_stats(block_trace_dir):
    expected = [
        {"name": r["kernel"], **{k: r[k] for k in ("total_ns", "instances", "min_ns", "max_ns")}}
        for r in _stats(BLOCK_TRACE, "kernels")["kernel_times"]["rows"]
    ]
    assert _rows(SPANS_FROM_BLOCKS_SQL, block_trace_dir) == expected


@pytest.mark.parametrize("recording", [BLOCK_TRACE, MEM_SAMPLED], ids=["block_trace", "mem_sampled"])
def test_duckdb_blocks_report_is_stats(recording, tmp_path):
    _export([recording], tmp_path / "p")
    keys = ("device", "kernel", "launches", "blocks", "blocks_recorded", "sms", "memory_events", "blocks_dropped")
    keys += ("block_ns_p50", "block_ns_p90", "block_ns_p99")
    expected = sorted(({k: r[k] for k in keys} for r in _stats(recording, "blocks")["blocks"]["rows"]), key=str)
    got = _rows(BLOCKS_REPORT_SQL, tmp_path / "p")
    if recording == MEM_SAMPLED:  # no block records: no durations, SMs from the samples
        sms = {r["kernel"]: r["sms"] for r in _rows(_SAMPLE_SMS, tmp_path / "p")}
        for r in got:
            r.update(sms=sms.get(r["kernel"], 0), block_ns_p50=None, block_ns_p90=None, block_ns_p99=None)
    assert sorted(got, key=str) == expected


_SAMPLE_SMS = """SELECT kernel, count(DISTINCT sm) AS sms FROM read_parquet('{d}/memory_samples/*/*/*.parquet')
WHERE launch_id IS NOT NULL GROUP BY kernel"""


def test_exact_counts_and_drops_per_flush_are_the_recordings(tmp_path):
    from gpuobs.analysis.launches import counted_total
    from gpuobs.recording_file.reader import load

    _export([MEM_SAMPLED], tmp_path / "p")
    rec = load(MEM_SAMPLED)
    # every counter slot once: rows of a shared slot carry its one total
    counted = _one(
        f"""SELECT sum(c) FROM (SELECT any_value(count) AS c
    FROM read_parquet('{tmp_path}/p/launch_counts/*/*/*.parquet') GROUP BY flush_seq, grid_id & {_slot_mask(rec)})"""
    )[0]
    assert counted == counted_total(rec) > 0
    flushes = _one(
        f"SELECT sum(attempted), sum(recorded), sum(dropped), count(*) FROM "
        f"read_parquet('{tmp_path}/p/flushes/*/*/*.parquet')"
    )
    t = rec.totals
    assert flushes == (t["attempted"], t["recorded"], t["dropped"], len(rec.flushes))


def _slot_mask(rec):
    from gpuobs.recording_file import schema

    return schema.launch_table_size(rec.schema_hash) - 1


def test_partitioned_by_process_and_gpu_with_api_calls_and_clock(tmp_path):
    from gpuobs.recording_file.reader import load

    _export([MEM_SAMPLED, API_TRACE], tmp_path / "p")
    pids = sorted(load(p).run.pid for p in (MEM_SAMPLED, API_TRACE))
    found = sorted(int(p.name.split("=")[1]) for p in (tmp_path / "p" / "launches").iterdir())
    assert found == pids
    for table, by_gpu in ((t, spec[0]) for t, spec in tables.TABLES.items()):
        for f in (tmp_path / "p").glob(f"{table}/*/**/*.parquet"):
            parts = f.relative_to(tmp_path / "p" / table).parts
            assert re.fullmatch(r"pid=\d+", parts[0])
            assert (len(parts) == 3 and re.fullmatch(r"gpu=\d+", parts[1])) if by_gpu else len(parts) == 2
    api = load(API_TRACE).api_calls
    names = _one(f"SELECT count(*), count(DISTINCT name) FROM read_parquet('{tmp_path}/p/api_calls/*/*.parquet')")
    assert names[0] == len(api) > 0 and names[1] > 1
    clock = _one(f"SELECT bool_or(used), any_value(offset_ns) FROM read_parquet('{tmp_path}/p/clock/*/*/*.parquet')")
    assert clock[0] and clock[1] is not None
    manifest = json.loads((tmp_path / "p" / tables.MANIFEST).read_text())
    assert manifest["gpuobs_parquet_schema_version"] == tables.SCHEMA_VERSION


def test_host_times_follow_the_measured_clock_relation(block_trace_dir):
    row = _one(
        f"""SELECT count(*), count(start_monotonic_ns), max(abs(start_ns - start_monotonic_ns - c.off)) FROM
        read_parquet('{block_trace_dir}/blocks/*/*/*.parquet'),
        (SELECT round(any_value(offset_ns)) AS off FROM read_parquet('{block_trace_dir}/clock/*/*/*.parquet')) c"""
    )
    assert row[0] == row[1] > 0 and row[2] == 0


def test_every_column_is_written_and_documented():
    doc = (ROOT / "docs" / "parquet-schema.md").read_text()
    assert f"Schema version: {tables.SCHEMA_VERSION}" in doc
    sections = re.split(r"^### ", doc, flags=re.M)[1:]
    documented = {
        part.split("\n", 1)[0].strip(): re.findall(r"^\| `(\w+)` \| ([\w ()]+?) \|", part, re.M) for part in sections
    }
    for table, (_, columns) in tables.TABLES.items():
        assert documented.get(table) == [(name, tables.type_name(kind)) for name, kind, _ in columns], table


def test_written_schema_is_the_declared_one(block_trace_dir):
    for table in ("launches", "blocks", "flushes", "kernels", "clock", "recordings"):
        f = next(block_trace_dir.glob(f"{table}/**/*.parquet"))
        assert pq.read_schema(f).remove_metadata() == tables.schema(table).remove_metadata(), table
        assert pq.read_schema(f).metadata[b"gpuobs_parquet_schema_version"] == str(tables.SCHEMA_VERSION).encode()


def test_a_selection_keeps_what_the_trace_keeps(tmp_path):
    args = ("--kernels", "elementwise", "--time-window", "20ms:60ms")
    _export([BLOCK_TRACE], tmp_path / "p", *args)
    r = gpuobs("export", BLOCK_TRACE, "-o", tmp_path / "t.pftrace", *args)
    assert r.returncode == 0, r.stderr
    slices = re.search(r"([\d,]+) block slices, ([\d,]+) kernel slices", r.stdout)
    blocks, kernels = (int(x.replace(",", "")) for x in slices.groups())
    n = _one(f"SELECT count(*) FROM read_parquet('{tmp_path}/p/blocks/*/*/*.parquet')")[0]
    m = _one(f"SELECT count(*) FROM read_parquet('{tmp_path}/p/launches/*/*/*.parquet')")[0]
    assert (n, m) == (blocks, kernels) and 0 < n < 28662
    kernels = duckdb.sql(f"SELECT DISTINCT kernel FROM read_parquet('{tmp_path}/p/blocks/*/*/*.parquet')").fetchall()
    assert all("elementwise" in k for (k,) in kernels)


def test_blocks_are_written_in_bounded_row_groups(tmp_path, monkeypatch):
    from gpuobs.columnar import parquet
    from gpuobs.recording_file.reader import load

    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 1000)
    parquet.write_parquet([load(BLOCK_TRACE)], tmp_path / "p")
    meta = pq.ParquetFile(next((tmp_path / "p").glob("blocks/*/*/*.parquet"))).metadata
    assert meta.num_rows == 28662
    assert meta.num_row_groups >= 29 and all(meta.row_group(i).num_rows <= 1000 for i in range(meta.num_row_groups))


def test_outputs_are_never_clobbered(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    r = gpuobs("export", BLOCK_TRACE, "--format", "parquet", "-o", mine, "-f")
    assert r.returncode == 2 and "no gpuobs Parquet export wrote" in r.stderr
    assert (mine / "notes.txt").read_text() == "keep"
    _export([BLOCK_TRACE], tmp_path / "p")
    r = gpuobs("export", BLOCK_TRACE, "--format", "parquet", "-o", tmp_path / "p")
    assert r.returncode == 2 and "-f/--force" in r.stderr
    _export([BLOCK_TRACE], tmp_path / "p", "-f", "--kernels", "nvjet")
    assert not list(tmp_path.glob(".p.*"))  # no temp directory left
    r = gpuobs("export", BLOCK_TRACE, "--format", "parquet", "-o", tmp_path / "q", "--host", BLOCK_TRACE)
    assert r.returncode == 2 and r.stderr.startswith("gpuobs: --host: for Perfetto traces only")
    r = gpuobs("export", BLOCK_TRACE, "--format", "parquet", "-o", tmp_path / "q", "--launches", "9:3")
    assert r.returncode == 2 and "--launches '9:3' is empty" in r.stderr
    assert not (tmp_path / "q").exists()
