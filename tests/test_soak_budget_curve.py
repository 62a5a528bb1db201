"""benchmarks/soak.py's budget curve: the file's size as each flush ends, found by a walk
of the chunk headers, against the data budget's allowance from the first clock sample,
the first module load and the tool's start. The oracle is the writer's own file position after each
flush, and the allowance worked out by hand."""

import sys
from pathlib import Path

import numpy as np

import gpuobs
from gpuobs.recording_file import schema, synthetic
from gpuobs.recording_file.recording_writer import RecordingWriter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import soak  # noqa: E402

MIB = 2**20
BUDGET = 1 * MIB  # bytes a second
BURST = 2 * MIB
T0 = synthetic.UPTIME_NS  # the first clock sample (host CLOCK_MONOTONIC)
TOOL_START = T0 - 3 * 10**9  # the tool started 3 s before it
MODULE_LOAD = T0 - 2 * 10**9  # the first module loaded 2 s before it


def write_run(path, events_per_flush):
    """One device, flush i at T0 + (i + 1) s, holding events_per_flush[i] block records."""
    ends = []
    with RecordingWriter(path) as w:
        w.run(pid=1, mode=schema.Mode.BLOCK_TRACE, start_monotonic_ns=TOOL_START)
        w.device(sm_count=8)
        w.module(module_id=1, load_monotonic_ns=MODULE_LOAD)
        clock = synthetic._clock_samples_between(synthetic.GLOBALTIMER_BASE, synthetic.GLOBALTIMER_BASE, 0)[:1]
        clock["monotonic_before"] = T0
        clock["monotonic_after"] = T0 + 1000
        w.clock_samples(clock)
        for seq, n in enumerate(events_per_flush):
            ev = np.zeros(n, schema.EVENT_DTYPE)
            ev["kind"] = schema.EventKind.BLOCK
            w.events(ev, flush_seq=seq)
            w.flush(flush_seq=seq, attempted=n, recorded=n, dropped=0, host_time_ns=T0 + (seq + 1) * 10**9)
            ends.append(w._fh.tell())
            w.sampling(flush_seq=seq, budget_bytes_per_s=BUDGET, burst_bytes=BURST)
        w.end(flushes=len(events_per_flush))
    return ends


def test_flush_ends_are_where_the_writer_left_each_flush(tmp_path):
    path = tmp_path / "run.gpuobs"
    ends = write_run(path, [100, 0, 5000, 7])
    assert soak.flush_chunk_ends(path) == ends


def test_the_curve_finds_where_and_by_how_much_the_file_passes_the_allowance(tmp_path):
    path = tmp_path / "run.gpuobs"
    # 64-byte records: 4 MiB in the first second (1 MiB over burst + 1 s), then 0.5 MiB a second
    per_flush = [4 * MIB // 64] + [MIB // 2 // 64] * 5
    ends = np.asarray(write_run(path, per_flush), np.float64)
    rec = gpuobs.load(path)
    curve = soak.budget_curve(path, rec, BUDGET, BURST)
    seconds = np.arange(1, len(per_flush) + 1)

    def row(earlier_s):
        """The curve's entry for a start earlier_s before the first clock sample (worst at flush 0)."""
        over = ends - (BURST + BUDGET * (seconds + earlier_s))
        return {
            "most_over_mib": round(over.max() / MIB, 2),
            "at_s": 1.0 + earlier_s,
            "at_flush": 0,
            "last_over_mib": round(over[-1] / MIB, 2),
        }

    assert curve["from_first_clock_sample"] == row(0)
    assert curve["from_first_clock_sample"]["most_over_mib"] > 0.99  # the first second's extra MiB
    assert curve["from_first_module_load"] == row(2)
    assert curve["from_tool_start"]["most_over_mib"] == row(3)["most_over_mib"] < 0
    assert curve["second_half_mib_per_s"] == round((ends[-1] - ends[3]) / MIB / 2, 3)
    assert curve["budget_mib_per_s"] == 1.0


def test_no_curve_without_a_budget(tmp_path):
    path = tmp_path / "run.gpuobs"
    write_run(path, [10, 10])
    assert soak.budget_curve(path, gpuobs.load(path), 0, 0) is None


def test_the_budget_spans_the_recording_from_its_first_module_load(tmp_path):
    path = tmp_path / "run.gpuobs"
    write_run(path, [100, 100, 100])
    out = soak.accounting(path)
    assert out["recording_span_s"] == 3 + 2  # three flushes a second apart after the clock sample, 2 s after the load
    assert out["budget_bytes_per_s"] == BUDGET and out["burst_bytes"] == BURST
