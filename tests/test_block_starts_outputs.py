"""What a user sees of a block_starts recording: block slices that end at upper
bounds and say which, kernel slices to the latest bound, and `stats`, `info`,
`export` and `record --help` saying what the bounds are."""

import json

import numpy as np
import pytest

import gpuobs
from gpuobs.analysis import launches as analysis
from gpuobs.analysis.block_ends import LABELS, EndBound
from gpuobs.analysis.kernel_names import slice_names
from gpuobs.perfetto_export.export import ExportOptions, export
from gpuobs.recording_file import synthetic

from .cli_helpers import gpuobs as run
from .encoder_helpers import assert_both_encoders_identical
from .trace_decode import decode

NOTES = {
    EndBound.SLOT: "upper bound: slot reuse",
    EndBound.STREAM: "upper bound: next kernel on the stream",
    EndBound.QUIET: "upper bound: quiet point",
    EndBound.NONE: "unknown",
}
SUFFIXES = {
    EndBound.SLOT: "",
    EndBound.STREAM: " (end: next kernel)",
    EndBound.QUIET: " (end: quiet point)",
    EndBound.NONE: " (end unknown)",
}


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    path, _ = synthetic.write_block_starts_recording(tmp_path_factory.mktemp("bs") / "r.gpuobs", devices=2)
    return path


@pytest.fixture(scope="module")
def exported(recording, tmp_path_factory):
    rec = gpuobs.load(recording)
    out = tmp_path_factory.mktemp("trace") / "t.pftrace"
    summary = export([rec], out)
    return rec, decode(out), summary


def _gpu_of(d, track):
    while not d.tracks[track].name.startswith("GPU "):
        track = d.tracks[track].parent_uuid
    return int(d.tracks[track].name.split()[1].rstrip(":"))


def test_one_slice_per_block_ending_at_its_bound_named_by_its_bound(exported):
    rec, d, summary = exported
    assert d.problems == []
    table = analysis.launch_table(rec)
    ends = table.block_ends
    ev = rec.events[ends.rows]
    fulls = sorted(set(table.name))
    slice_name = dict(zip(fulls, slice_names(fulls, 90)))  # the trace's short, unique names
    want = sorted(
        (
            int(dev),
            int(sm),
            int(start),
            int(end),
            slice_name[table.name[k]] + SUFFIXES[EndBound(q)],
            NOTES[EndBound(q)],
            int(rec.launches["launch_id"][k]),
            int(x),
        )
        for dev, sm, start, end, q, k, x in zip(
            rec.event_devices[ends.rows],
            ev["sm_id"],
            ev["time_start"],
            ends.end_bound_ns,
            ends.quality,
            ends.launch,
            ev["block_x"],
        )
    )
    blocks = [s for s in d.slices if d.tracks[s[0]].name.startswith("SM ")]
    got = sorted(
        (_gpu_of(d, t), int(d.tracks[t].name.split()[1]), s, e, name, a["end"], a["launch"], a["block"])
        for t, name, s, e, a in blocks
    )
    assert got == want
    assert summary.block_slices == len(ends.rows)
    by_label = {}
    for g in summary.gpus:
        for label, n in g.end_bounds.items():
            by_label[label] = by_label.get(label, 0) + n
    assert by_label == {LABELS[q]: int((ends.quality == q).sum()) for q in EndBound}
    sms = [t for t in d.tracks.values() if t.name == "SMs"]
    assert sms and all("UPPER BOUND" in t.description for t in sms)


def test_kernel_slices_run_to_the_latest_bound_of_their_blocks(exported):
    rec, d, _ = exported
    table = analysis.launch_table(rec)
    ends = table.block_ends
    kernels = {a["launch"]: (s, e, a) for t, _n, s, e, a in d.slices if d.tracks[t].name == "Kernels"}
    assert len(kernels) == len(rec.launches)
    for k, launch_id in enumerate(rec.launches["launch_id"].tolist()):
        mine = ends.launch == k
        start, end, args = kernels[launch_id]
        assert start == int(rec.events["time_start"][ends.rows][mine].min())
        assert end == int(ends.end_bound_ns[mine].max())
        assert args["end"] == NOTES[EndBound(table.end_bound[k])]
    assert {a["end"] for _s, _e, a in kernels.values()} >= {NOTES[EndBound.NONE], NOTES[EndBound.QUIET]}
    kernel_tracks = [t for t in d.tracks.values() if t.name == "Kernels"]
    assert all("upper bound" in t.description for t in kernel_tracks)


def test_block_trace_slices_carry_no_end_argument(tmp_path, block_recording):
    out = tmp_path / "bt.pftrace"
    export([gpuobs.load(block_recording)], out)
    assert all("end" not in s[4] for s in decode(out).slices)


def test_both_encoders_write_the_same_block_starts_trace(tmp_path, recording, monkeypatch):
    assert_both_encoders_identical(gpuobs.load(recording), tmp_path, monkeypatch)


def test_without_block_args_weak_bounds_keep_their_names(tmp_path, recording):
    out = tmp_path / "n.pftrace"
    export([gpuobs.load(recording)], out, ExportOptions(block_args=False))
    d = decode(out)
    blocks = [s for s in d.slices if d.tracks[s[0]].name.startswith("SM ")]
    assert all(s[4] == {} for s in blocks)
    assert {suffix for q, suffix in SUFFIXES.items() if q != EndBound.SLOT} <= {
        n[n.index(" (end") :] for _t, n, _s, _e, _a in blocks if " (end" in n
    }


def test_stats_gives_each_kernels_bound_shares_and_the_accounting(recording):
    rec = gpuobs.load(recording)
    r = run("stats", recording)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "Block end bounds per kernel" in text and "upper bounds: block_starts records no end" in text
    assert "measured on an H200" in text and "p50 160 ns" in text and "docs/benchmarks.md" in text
    t = rec.totals
    assert f"warp arrivals {t['warp_arrivals']:,} attempted, {t['warp_arrivals_dropped']:,} dropped" in text
    result = json.loads(run("stats", recording, "--json").stdout)
    bounds = result["block_ends"]
    ends = analysis.launch_table(rec).block_ends
    assert bounds["blocks_bounded"] == len(ends.rows) == sum(r["blocks_bounded"] for r in bounds["rows"])
    for row in bounds["rows"]:
        assert sum(row[f"{LABELS[q]}_pct"] for q in EndBound) == pytest.approx(100, abs=0.3)
    incomplete = sum(r["slots_incomplete"] for r in bounds["rows"])
    assert incomplete == bounds["slots_incomplete"] > 0
    assert result["kernel_times"]["ends_are_bounds"] and result["kernel_times"]["rows"]
    csv = run("stats", recording, "--format", "csv").stdout
    assert "Slot (%),Stream (%),Quiet (%),None (%)" in csv


def test_stats_kernel_spans_are_the_bounded_launch_spans(recording):
    rec = gpuobs.load(recording)
    table = analysis.launch_table(rec)
    times = json.loads(run("stats", recording, "-r", "kernels", "--json").stdout)["kernel_times"]
    rows = times["rows"]
    spans = table.last_end.astype(np.int64) - table.first_start.astype(np.int64)
    weak = table.end_weak & (table.blocks_recorded > 0)
    assert 0 < weak.sum() < len(spans)  # launches ending at a weak bound are left out, and counted
    assert sum(r["total_ns"] for r in rows) == spans[~weak].sum()
    assert sum(r["weak"] for r in rows) == times["launches_end_weak"] == weak.sum()


def test_info_says_how_block_ends_are_bounded(recording):
    r = run("info", recording)
    assert r.returncode == 0, r.stderr
    assert "block ends" in r.stdout and "ends bounded by:" in r.stdout and "% slot" in r.stdout
    assert "warp slots" in r.stdout and "SLOTS_INCOMPLETE" in r.stdout
    d = json.loads(run("info", recording, "--json").stdout)
    assert d["block_ends"]["warp_arrivals"] == gpuobs.load(recording).totals["warp_arrivals"]
    assert (
        json.loads(run("info", synthetic.write_block_trace_recording(recording.parent / "bt.gpuobs"), "--json").stdout)[
            "block_ends"
        ]
        is None
    )


def test_export_says_block_ends_are_upper_bounds(recording, tmp_path):
    r = run("export", recording, "-o", tmp_path / "t.pftrace")
    assert r.returncode == 0, r.stderr
    assert "block ends are upper bounds" in r.stdout


def test_record_help_lists_block_starts():
    r = run("record", "--help", COLUMNS="200")
    assert r.returncode == 0
    assert "block_starts" in r.stdout and "end an upper bound" in r.stdout


def test_plot_draws_occupancy_to_the_bounds(recording):
    pytest.importorskip("matplotlib")
    from gpuobs.analysis.plot import occupancy

    rec = gpuobs.load(recording)
    grid, _t0, width = occupancy(rec, 0)
    ends = analysis.launch_table(rec).block_ends
    on = (rec.event_devices[ends.rows] == 0) & (ends.quality != EndBound.NONE)
    busy = (ends.end_bound_ns[on].astype(np.int64) - rec.events["time_start"][ends.rows][on].astype(np.int64)).sum()
    assert grid.sum() * width == pytest.approx(busy, rel=1e-6)
