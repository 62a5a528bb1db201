"""block_trace block ends a later run of the block's grid id stamped
(BLOCK_END_UNCONFIRMED) in the Perfetto trace, on the real H100 while-graph
recording (a WHILE body's runs share a grid id; 356 of its ends are flagged): each
such block is a zero-length slice at its start, named '<kernel> (end unconfirmed)',
with an `end` argument saying why; its lanes follow that end; the streamed export
writes the same trace as the in-memory one."""

import io
from pathlib import Path

import numpy as np
import pytest

import gpuobs
from gpuobs.perfetto_export import export as ex
from gpuobs.perfetto_export import streamed
from gpuobs.perfetto_export.lanes import assign_lanes
from gpuobs.recording_file import schema
from gpuobs.recording_file import windows as windows_module
from gpuobs.recording_file.windows import open_windows

from .encoder_helpers import assert_both_encoders_identical
from .trace_decode import decode

WHILE_GRAPH = Path(__file__).resolve().parent / "data" / "while_graph_block_trace.gpuobs"
MARK = " (end unconfirmed)"
NOTE = "unconfirmed: stamped by a later run of its grid, not this block's; drawn at its start"


def _trace(tmp_path, source, **options):
    path = tmp_path / "trace.pftrace"
    ex.export([source], path, ex.ExportOptions(**options))
    d = decode(path)
    assert not d.problems, d.problems[:5]
    return d


def _block_slices(d):
    """{(sm, block_x, start): (track, name, end, args)} of the SM tracks' slices."""
    sm_of_track = {u: int(t.name.split()[1]) for u, t in d.tracks.items() if t.name.startswith("SM ")}
    return {
        (sm_of_track[track], args["block"], start): (track, name, end, args)
        for track, name, start, end, args in d.slices
        if track in sm_of_track
    }


def _next_run_starts(ev) -> np.ndarray:
    """Per event: the start of the same block's next run of its grid id (uint64 max: none)."""
    order = np.lexsort((ev["time_start"], ev["block_z"], ev["block_y"], ev["block_x"], ev["grid_id"]))
    e = ev[order]
    same = e["grid_id"][1:] == e["grid_id"][:-1]
    for axis in ("block_x", "block_y", "block_z"):
        same &= e[axis][1:] == e[axis][:-1]
    nxt = np.full(len(ev), np.iinfo(np.uint64).max, np.uint64)
    nxt[order[:-1][same]] = e["time_start"][1:][same]
    return nxt


def _flagged(ev) -> np.ndarray:
    return (ev["flags"] & schema.BLOCK_END_UNCONFIRMED) != 0


def test_flagged_ends_are_drawn_at_their_start_marked(tmp_path):
    rec = gpuobs.load(WHILE_GRAPH)
    ev = rec.events
    flagged = _flagged(ev)
    assert int(flagged.sum()) == 356
    slices = _block_slices(_trace(tmp_path, rec))
    assert len(slices) == len(ev)
    nxt = _next_run_starts(ev)
    for i, e in enumerate(ev):
        _, name, end, args = slices[(int(e["sm_id"]), int(e["block_x"]), int(e["time_start"]))]
        kernel = name.removesuffix(MARK)
        assert kernel in ("loop_body", "loop_condition", "before_loop")
        if flagged[i]:
            # the stamp (up to 13.6 us here) reached past the same block's next run (at most 12.8 us on)
            assert int(e["time_end"]) > int(nxt[i])
            assert name == kernel + MARK and end == int(e["time_start"]) and args["end"] == NOTE
            assert end <= int(nxt[i])
        else:
            assert name == kernel and end == max(int(e["time_end"]), int(e["time_start"])) and "end" not in args


def test_lanes_follow_the_drawn_ends(tmp_path):
    """The SM tracks' lanes are those of the drawn ends: a stamp that reached into the
    next run no longer pushes blocks off their SM's first lane (779 of 2,132 are off
    it, not 791)."""
    rec = gpuobs.load(WHILE_GRAPH)
    ev = rec.events
    start = ev["time_start"]
    drawn = np.where(_flagged(ev), start, np.maximum(ev["time_end"], start))
    lane = assign_lanes(ev["sm_id"].astype(np.int64), start, drawn)
    assert int((lane > 0).sum()) == 779
    expected = {}
    for e, k in zip(ev, lane):
        key = (int(e["sm_id"]), int(e["block_x"]), int(e["time_start"]))
        expected.setdefault((int(e["sm_id"]), int(k)), set()).add(key)
    found = {}
    for key, (track, *_rest) in _block_slices(_trace(tmp_path, rec)).items():
        found.setdefault(track, set()).add(key)
    assert sorted(map(sorted, found.values())) == sorted(map(sorted, expected.values()))


def test_sms_description_says_what_the_mark_means(tmp_path):
    d = _trace(tmp_path, gpuobs.load(WHILE_GRAPH))
    (sms,) = d.tracks_named("SMs")
    description = d.tracks[sms].description
    assert description.startswith(ex.SMS_DESCRIPTION) and "'(end unconfirmed)', is a zero-length slice" in description


def test_a_recording_without_flagged_ends_is_drawn_as_measured(tmp_path):
    """The same recording with its flags cleared: every slice as recorded, no mark, no
    `end` argument, the plain SMs description; its other blocks are drawn the same."""
    rec = gpuobs.load(WHILE_GRAPH)
    flagged = _flagged(rec.events)
    marked = _block_slices(_trace(tmp_path, rec))
    rec.events["flags"] &= ~np.uint16(schema.BLOCK_END_UNCONFIRMED)
    d = _trace(tmp_path, rec)
    (sms,) = d.tracks_named("SMs")
    assert d.tracks[sms].description == ex.SMS_DESCRIPTION
    plain = _block_slices(d)
    assert not any(MARK in name or "end" in args for _, name, _, args in plain.values())
    for e, late in zip(rec.events, flagged):
        key = (int(e["sm_id"]), int(e["block_x"]), int(e["time_start"]))
        assert plain[key][2] == max(int(e["time_end"]), int(e["time_start"]))
        assert (plain[key][1:] == marked[key][1:]) != bool(late)


def _both(**options) -> tuple:
    """(in-memory trace, streamed trace) of the while-graph recording; both summaries
    count the same marked blocks."""
    out, counted = [], []
    for source in (gpuobs.load(WHILE_GRAPH), open_windows(WHILE_GRAPH)):
        if hasattr(source, "chunks"):
            assert streamed.can_stream(source, ex.ExportOptions(**options), ())
        buf = io.BytesIO()
        try:
            summary = ex.export([source], buf, ex.ExportOptions(**options))
            counted.append(summary.gpus[0].ends_unconfirmed)
        finally:
            if hasattr(source, "close"):
                source.close()
        out.append(buf.getvalue())
    assert counted[0] == counted[1] > 0
    return tuple(out)


@pytest.mark.parametrize("small", [False, True], ids=["defaults", "small-batches"])
@pytest.mark.parametrize(
    "options",
    [{}, {"time_window": "1ms:37.52ms"}, {"launches": "8:12"}, {"block_args": False}],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "all",
)
def test_streamed_export_marks_the_same_blocks(options, small, monkeypatch):
    if small:  # windows span segments, the GPU's SMs span batches
        monkeypatch.setattr(windows_module, "SEGMENT_ROWS", 300)
        monkeypatch.setattr(ex, "BATCH_BLOCKS", 400)
    whole, streamed_trace = _both(**options)
    assert MARK.encode() in whole
    assert streamed_trace == whole


def test_both_encoders_write_the_marks_alike(tmp_path, monkeypatch):
    rec = gpuobs.load(WHILE_GRAPH)
    export_path = tmp_path / "native.pftrace"
    ex.export([rec], export_path, ex.ExportOptions())
    assert MARK.encode() in export_path.read_bytes()
    assert_both_encoders_identical(rec, tmp_path, monkeypatch)
