"""block_starts end bounds that reach across a wait the tool made: labelled weak,
left out of the kernel time summary, and the summary never more than the device
span. The recordings are simulated decode loops (synthetic.write_block_starts_wait_recording)
whose true block ends are known, the same blocks also written as block_trace."""

import json

import numpy as np
import pytest

import gpuobs
from gpuobs.analysis import launches as analysis
from gpuobs.analysis.block_ends import EndBound
from gpuobs.analysis.kernel_summary import kernel_times
from gpuobs.recording_file import synthetic

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
    weak_blocks = sum(round(row["weak_pct"] * row["blocks"] / 100) for row in result["block_ends"]["rows"])
    assert weak_blocks == int(ends.weak.sum()) == result["block_ends"]["weak"]
    csv = run("stats", rec.path, "--format", "csv").stdout.splitlines()[0].split(",")
    assert "weak" in csv and "weak_pct" in csv


def test_the_tools_wait_is_said(tmp_path):
    rec, _ = _write(tmp_path, "n")
    info = run("info", rec.path).stdout
    assert "waited 1 times so far, 3060.0 ms in all" in info and "% weak" in info
