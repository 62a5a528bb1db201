"""block_starts end bounds that reach across a wait the tool made: labelled weak,
left out of the kernel time summary, and the summary never more than the device
span. The recordings are simulated decode loops (synthetic.write_block_starts_wait_recording)
whose true block ends are known, the same blocks also written as block_trace."""

import json

import numpy as np
import pytest

import gpuobs
from gpuobs.analysis import block_ends as be
from gpuobs.analysis import launches as analysis
from gpuobs.analysis.block_ends import EndBound
from gpuobs.analysis.kernel_summary import kernel_times
from gpuobs.recording_file import schema, synthetic
from gpuobs.recording_file.recording_writer import RecordingWriter

from .cli_helpers import gpuobs as run

WAIT_NS = 3_060_000_000
WAIT_AT = synthetic.GLOBALTIMER_BASE + WAIT_NS  # no launch after the wait is enqueued before this


def _write(tmp_path, name, **kw):
    path, truth = synthetic.write_block_starts_wait_recording(tmp_path / f"{name}.gpuobs", wait_ns=WAIT_NS, **kw)
    return gpuobs.load(path), truth


@pytest.fixture(scope="module", params=["graph", "plain", "no_clock"])
def waited(request, tmp_path_factory):
    kw = {"graph": request.param != "plain", "clock": request.param != "no_clock"}
    rec, truth = _write(tmp_path_factory.mktemp("wait"), request.param, **kw)
    return rec, truth, analysis.launch_table(rec), kw["graph"]


def _true_last_end(rec, truth) -> np.ndarray:
    by_grid = {int(g): i for i, g in enumerate(rec.launches["grid_id"])}
    out = np.zeros(len(rec.launches), np.uint64)
    np.maximum.at(out, np.array([by_grid[int(g)] for g in truth["grid_id"]]), truth["time_end"])
    return out


def test_every_bound_across_the_wait_is_weak_and_no_other_is(waited):
    rec, truth, table, graph = waited
    ends = table.block_ends
    start = rec.events["time_start"][ends.rows]
    across = (start < WAIT_AT) & (ends.end_bound_ns > WAIT_AT)
    # graph nodes: the last steps before the wait, by slots reused after it; plain: the last launch, by the next
    assert across.sum() >= (20 if graph else 2)
    assert ends.weak[across].all()
    # before the wait the host was ahead: bounds made by queued work are tight
    before = (start < WAIT_AT) & ~across & (ends.quality != EndBound.NONE)
    assert before.sum() > 100 and not ends.weak[before].any()


def test_no_launch_in_the_summary_spans_the_wait(waited):
    rec, _truth, table, graph = waited
    spanned = table.blocks_recorded > 0
    tight = spanned & ~table.end_weak
    crosses = spanned & (table.first_start < WAIT_AT) & (table.last_end > WAIT_AT)
    assert crosses.sum() >= (3 if graph else 1)  # several kernels of the steps before the wait
    assert not (tight & crosses).any()
    times = kernel_times(rec, table)
    assert times.launches_end_weak == int((spanned & table.end_weak).sum()) >= crosses.sum()
    assert max(r["max_ns"] for r in times.rows if r["max_ns"] is not None) < 1_000_000  # a step is ~0.1 ms


def test_the_summary_never_exceeds_the_device_span(waited):
    rec, truth, table, _graph = waited
    true_span = int(truth["time_end"].max()) - int(truth["time_start"].min())
    times = kernel_times(rec, table)
    total = sum(r["total_ns"] for r in times.rows)
    assert 0 < total <= true_span  # before: 24.5 s of kernel time in a 3.06 s recording
    assert total < 10_000_000  # the device was busy a few hundred microseconds; the wait is not kernel time
    assert int(rec.events["time_start"].max()) - int(table.first_start.min()) <= times.device_span_ns <= true_span


def test_tight_spans_hold_the_block_trace_spans_of_the_same_blocks(tmp_path):
    rec, truth = _write(tmp_path, "bs", graph=True)
    traced, _ = _write(tmp_path, "bt", graph=True, block_trace=True)
    bs, bt = analysis.launch_table(rec), analysis.launch_table(traced)
    true_end = _true_last_end(rec, truth)
    assert (bt.last_end == true_end).all()  # the block_trace recording holds the true ends
    bounded = (bs.blocks_recorded > 0) & (bs.end_bound != EndBound.NONE)
    tight = bounded & ~bs.end_weak
    assert tight.sum() >= 5
    assert (bs.last_end[tight] >= bt.last_end[tight]).all()  # still upper bounds
    assert (bs.last_end[tight] - bt.last_end[tight] < 200_000).all()  # and none reaches across the wait
    bs_rows = {r["name"]: r for r in kernel_times(rec, bs).rows}
    bt_rows = {r["name"]: r for r in kernel_times(traced, bt).rows}
    assert set(bs_rows) == set(bt_rows)
    for name, row in bs_rows.items():
        assert row["instances"] + row["weak"] == bt_rows[name]["instances"]
    assert sum(r["total_ns"] for r in bs_rows.values()) < 5 * sum(r["total_ns"] for r in bt_rows.values())


def test_stats_says_per_kernel_how_tight_its_bounds_are(tmp_path):
    rec, _ = _write(tmp_path, "s", graph=True)
    r = run("stats", rec.path)
    assert r.returncode == 0, r.stderr
    assert "Weak %" in r.stdout and "  Weak  " in r.stdout
    assert "end at a weak bound (Weak): left out of Total and Time %" in r.stdout
    result = json.loads(run("stats", rec.path, "--json").stdout)
    k = result["kernel_times"]
    assert k["launches_end_weak"] == sum(row["weak"] for row in k["rows"]) > 0
    assert sum(row["total_ns"] for row in k["rows"]) <= k["device_span_ns"]
    ends = analysis.launch_table(rec).block_ends
    weak_blocks = sum(round(row["weak_pct"] * row["blocks_bounded"] / 100) for row in result["block_ends"]["rows"])
    assert weak_blocks == int(ends.weak.sum()) == result["block_ends"]["blocks_weak"]
    csv = run("stats", rec.path, "--format", "csv").stdout.splitlines()[0].split(",")
    assert "Weak" in csv and "Weak (%)" in csv  # nsys-style headers


def test_the_tools_wait_is_said(tmp_path):
    rec, _ = _write(tmp_path, "n")
    info = run("info", rec.path).stdout
    assert "waited 1 times so far, 3060.0 ms in all" in info and "% weak" in info


# -- the rules one at a time, on hand-made recordings (block_ends.py's module doc) ---------------------------

BASE = synthetic.GLOBALTIMER_BASE
HALF = 100  # half the clock samples' bracket: enqueue times are known to within it


def _launch(launch_id, grid, enqueued, stream=7, flags=0, replay=0):
    row = np.zeros(1, schema.dtype("gpuobs_launch"))
    row["launch_id"], row["grid_id"], row["stream_id"], row["flags"] = launch_id, grid, stream, flags
    row["grid"], row["block"], row["graph_launch_id"] = (4, 1, 1), (32, 1, 1), replay
    row["host_begin_ns"] = BASE + enqueued  # the samples below make host and device clocks equal
    return row


def _block(t, slot, grid, x=0):
    e = np.zeros(1, schema.EVENT_DTYPE)
    e["time_start"], e["grid_id"], e["block_x"], e["address"] = BASE + t, grid, x, 1 << slot
    e["thread_index"], e["kind"] = 32, schema.EventKind.BLOCK
    return e


def _weak(tmp_path, windows, clock=True):
    """windows: (launches, blocks, quiet ns from BASE or None) per flush. Returns
    {(grid, x): (bound ns from BASE, EndBound, weak)}."""
    path = tmp_path / "w.gpuobs"
    with RecordingWriter(path) as w:
        w.run(mode=schema.Mode.BLOCK_STARTS)
        if clock:
            s = np.zeros(2, schema.dtype("gpuobs_clock_sample"))
            s["method"], s["device_ns"] = 1, [BASE, BASE + 10**6]
            for clk in ("monotonic", "boottime", "realtime"):
                s[f"{clk}_before"], s[f"{clk}_after"] = s["device_ns"] - HALF, s["device_ns"] + HALF
            w.clock_samples(s)
        for seq, (launches, blocks, quiet) in enumerate(windows):
            events = np.concatenate(blocks)
            w.launches(np.concatenate(launches))
            w.flush(flush_seq=seq, attempted=len(events), recorded=len(events), dropped=0)
            w.slots(flush_seq=seq, device_quiet_ns=0 if quiet is None else BASE + quiet)
            w.events(events, flush_seq=seq)
    rec = gpuobs.load(path)
    ends = be.block_end_bounds(rec)
    ev = rec.events[ends.rows]
    return {
        (int(g), int(x)): (int(e) - BASE, EndBound(q), bool(k))
        for g, x, e, q, k in zip(ev["grid_id"], ev["block_x"], ends.end_bound_ns, ends.quality, ends.weak)
    }


def test_a_bound_made_by_work_enqueued_before_the_block_started_is_tight(tmp_path):
    launches = [_launch(1, 1001, enqueued=0), _launch(2, 1002, enqueued=500 - 2 * HALF)]
    found = _weak(tmp_path, [(launches, [_block(500, 0, 1001), _block(900, 0, 1002)], None)])
    assert found[(1001, 0)] == (900, EndBound.SLOT, False)


def test_a_bound_made_by_work_enqueued_after_the_block_started_is_weak(tmp_path):
    # enqueued 50 ns before the block started, but known only to within 100 ns: not surely before
    for enqueued, weak in ((450, True), (5_000, True), (250, False)):
        launches = [_launch(1, 1001, enqueued=0), _launch(2, 1002, enqueued=enqueued)]
        found = _weak(tmp_path, [(launches, [_block(500, 0, 1001), _block(9_000, 0, 1002)], None)])
        assert found[(1001, 0)] == (9_000, EndBound.SLOT, weak), enqueued
    # the same holds for the next kernel on the stream
    launches = [_launch(1, 1001, enqueued=0), _launch(2, 1002, enqueued=5_000)]
    found = _weak(tmp_path, [(launches, [_block(500, 0, 1001), _block(9_000, 1, 1002)], None)])
    assert found[(1001, 0)] == (9_000, EndBound.STREAM, True)


def test_a_later_block_of_the_same_launch_or_replay_never_makes_a_weak_bound(tmp_path):
    # enqueue times that would be late (the host clock says after the start): the same launch, the same replay
    node = schema.LaunchFlag.GRAPH_NODE
    launches = [_launch(1, 1001, enqueued=800), _launch(2, 1002, enqueued=800, flags=node, replay=9)]
    launches.append(_launch(3, 1003, enqueued=800, flags=node, replay=9))
    blocks = [_block(500, 0, 1001), _block(700, 0, 1001, x=1), _block(900, 1, 1002), _block(950, 1, 1003)]
    found = _weak(tmp_path, [(launches, blocks, None)])
    assert found[(1001, 0)] == (700, EndBound.SLOT, False)
    assert found[(1002, 0)] == (950, EndBound.SLOT, False)


def test_a_quiet_bound_is_weak(tmp_path):
    found = _weak(tmp_path, [([_launch(1, 1001, enqueued=0)], [_block(500, 0, 1001)], 600)])
    assert found[(1001, 0)] == (600, EndBound.QUIET, True)


def test_without_clock_samples_a_later_flush_window_makes_a_bound_weak(tmp_path):
    raced = schema.LaunchFlag.RACED_FLUSH
    first = (
        [_launch(1, 1001, enqueued=0), _launch(2, 1002, enqueued=0)],
        [_block(500, 0, 1001), _block(900, 0, 1002), _block(950, 1, 1002, x=1)],
        None,
    )
    # 1003 is listed in the second window; 1004 raced the first flush: listed in the second, enqueued before it
    second = (
        [_launch(3, 1003, enqueued=0), _launch(4, 1004, enqueued=0, stream=8, flags=raced)],
        [_block(1_500, 0, 1003), _block(1_200, 1, 1004)],
        None,
    )
    found = _weak(tmp_path, [first, second], clock=False)
    assert found[(1001, 0)] == (900, EndBound.SLOT, False)  # by 1002: the same window
    assert found[(1002, 0)] == (1_500, EndBound.SLOT, True)  # by 1003: a later window
    assert found[(1002, 1)] == (1_200, EndBound.SLOT, False)  # by 1004: enqueued in 1002's window
