"""Launch resolution: events to launches, graph replays, raced launches, per-launch tables."""

from pathlib import Path

import numpy as np
import pytest

import gpuobs
from gpuobs.analysis import launches as analysis
from gpuobs.recording_file import schema, synthetic
from gpuobs.recording_file.recording_writer import RecordingWriter


def _one_window(path, launches, ev):
    """A recording of these launches and events in one flush window, nothing dropped:
    (the recording, launch_index_of_events of it)."""
    with RecordingWriter(path) as w:
        w.launches(launches)
        w.flush(attempted=len(ev), recorded=len(ev), dropped=0)
        w.events(ev)
    rec = gpuobs.load(path)
    return rec, analysis.launch_index_of_events(rec)


def test_every_block_resolves_to_its_launch(block_recording):
    rec = gpuobs.load(block_recording)
    of = analysis.launch_index_of_events(rec)
    assert (of >= 0).all()
    assert (rec.launches["grid_id"][of] == rec.events["grid_id"]).all()
    table = analysis.launch_table(rec, of)
    assert (table.blocks_recorded == 1024).all() and (table.counted == 1024).all()
    for i in range(len(rec.launches)):
        mine = rec.events[of == i]
        assert table.first_start[i] == mine["time_start"].min()
        assert table.last_end[i] == mine["time_end"].max()


@pytest.mark.parametrize("grid_id", [77, (1 << 63) + 77], ids=["packed-keys", "keys-too-wide-to-pack"])
def test_graph_replays_sharing_a_grid_id_are_split_in_time(tmp_path, grid_id):
    # 3 replays of one graph node: same grid id, serialised in time, within one window.
    # A grid id of 64 bits leaves no room for the window beside it: the keys stay rows.
    key = analysis._key(np.zeros(1, np.uint32), np.ones(1, np.uint32), np.array([grid_id], np.uint64))
    assert (analysis._packed(key)[0].dtype == np.uint64) == (grid_id == 77)
    ev, launches = synthetic.block_trace_events(3, 500, sm_count=16, gap_ns=2_000)
    ev["grid_id"] = grid_id
    launches["grid_id"] = grid_id
    launches["flags"] = 1
    rec, of = _one_window(tmp_path / "g.gpuobs", launches, ev)
    assert (of >= 0).all()
    # each replay got exactly its own 500 blocks, in time order
    assert np.bincount(of).tolist() == [500, 500, 500]
    starts = [rec.events["time_start"][of == k].min() for k in range(3)]
    assert starts == sorted(starts)


@pytest.mark.parametrize("flagged", [True, False], ids=["flagged", "unflagged"])
def test_replay_split_is_not_fooled_by_ends_stamped_by_the_next_replay(tmp_path, flagged):
    # A tiny graph node replayed back to back: warps of replay k+1 that exit
    # before their leader publishes the block find replay k's slot (same grid id
    # and block) and stamp its end. Such ends are flagged when the exit count
    # overshoots, and not when the block's own early exits cancel it out; the
    # split must not let the late ends hide the gap between replays either way.
    ev, launches = synthetic.block_trace_events(3, 500, sm_count=16, gap_ns=2_000)
    ev["grid_id"] = 77
    launches["grid_id"] = 77
    launches["flags"] = 1
    first = np.flatnonzero(ev["time_start"] < np.sort(ev["time_start"])[500])[:40]
    ev["time_end"][first] = ev["time_end"].max()  # stamped by a later replay's exits
    if flagged:
        ev["flags"][first] |= schema.BLOCK_END_UNCONFIRMED
    path = tmp_path / "o.gpuobs"
    with RecordingWriter(path) as w:
        w.launches(launches)
        w.flush(attempted=len(ev), recorded=len(ev), dropped=0, unconfirmed_ends=len(first) if flagged else 0)
        w.events(ev)
    of = analysis.launch_index_of_events(gpuobs.load(path))
    assert np.bincount(of).tolist() == [500, 500, 500]


def test_replay_split_by_grid_size_when_flagged_ends_fake_the_gaps(tmp_path):
    # Seen on the H200 (a 77-block child-graph node, 10 back-to-back replays):
    # replay 0's ends all flagged (counted from their starts, which leaves small
    # clean gaps between its own blocks) while replay 1's last end, stamped late
    # without a flag, hides the real gap to replay 2. Time cuts alone gave replays
    # 1, 1, ... blocks; every block is there, so they split by grid size in start order.
    starts = np.concatenate([r * 1000 + np.arange(4) * 10 for r in range(3)]).astype(np.uint64)
    ev = np.zeros(12, schema.EVENT_DTYPE)
    ev["kind"] = schema.EventKind.BLOCK
    ev["grid_id"] = 77
    ev["time_start"] = starts
    ev["time_end"] = starts + 50
    ev["block_x"] = np.tile(np.arange(4), 3)
    ev["thread_index"] = 32
    ev["exit_count"] = 32
    ev["flags"][:4] = schema.BLOCK_END_UNCONFIRMED
    ev["time_end"][:4] = 2900
    ev["time_end"][7] = 2600  # replay 1, unflagged, past replay 2's start
    _, launches = synthetic.block_trace_events(3, 4, sm_count=4, gap_ns=1_000)
    launches["grid_id"] = 77
    launches["flags"] = 1
    path = tmp_path / "s.gpuobs"
    with RecordingWriter(path) as w:
        w.launches(launches)
        w.flush(attempted=12, recorded=12, dropped=0, unconfirmed_ends=4)
        w.events(ev)
    of = analysis.launch_index_of_events(gpuobs.load(path))
    assert of.tolist() == [0] * 4 + [1] * 4 + [2] * 4


def _replay_and_rank(ev, blocks):
    """Of synthetic replays of `blocks` blocks each, every event's replay and its rank in
    that replay's start order (replays never overlap, so start order gives both)."""
    by_time = np.argsort(ev["time_start"], kind="stable")
    replay, rank = np.empty(len(ev), int), np.empty(len(ev), int)
    replay[by_time], rank[by_time] = np.arange(len(ev)) // blocks, np.arange(len(ev)) % blocks
    return replay, rank


def _replays_in_part(tmp_path, kept, replays=10, blocks=500, resident=4, touch=None):
    """`replays` replays of one graph node (one grid id, one window), of which only the
    blocks `kept(replay, rank in start order)` were recorded, after `touch(events,
    replay, rank)` where given: (blocks per launch, the true replays each launch's
    blocks came from)."""
    ev, launches = synthetic.block_trace_events(replays, blocks, sm_count=16, resident=resident, gap_ns=2_000)
    ev["grid_id"] = 77
    launches["grid_id"] = 77
    launches["flags"] = 1
    replay, rank = _replay_and_rank(ev, blocks)
    if touch is not None:
        touch(ev, replay, rank)
    keep = kept(replay, rank)
    _, of = _one_window(tmp_path / "p.gpuobs", launches, ev[keep])
    assert (of >= 0).all()
    came_from = [sorted(set(replay[keep][of == i].tolist())) for i in range(replays)]
    return np.bincount(of, minlength=replays).tolist(), came_from


def test_replays_sampled_out_whole_leave_the_others_whole(tmp_path):
    # The sample gate closed for replays 0-4 and open for 5-9: five whole replays
    # among ten listed go one each to the first five launches, not in pieces to all ten.
    sizes, came_from = _replays_in_part(tmp_path, lambda replay, rank: replay >= 5)
    assert sizes == [500] * 5 + [0] * 5
    assert came_from == [[5], [6], [7], [8], [9]] + [[]] * 5


@pytest.mark.parametrize(
    "kept, sizes",
    [
        # the gate opened late in replay 2 and closed early in replay 6
        (
            lambda replay, rank: (
                ((replay == 2) & (rank >= 300)) | ((replay > 2) & (replay < 6)) | ((replay == 6) & (rank < 300))
            ),
            [200, 500, 500, 500, 300],
        ),
        # closed in replay 1 (its first 200 blocks kept), opened again late in replay 6:
        # no block of the two parts repeats, the off time between parts them
        (
            lambda replay, rank: ((replay == 1) & (rank < 200)) | ((replay == 6) & (rank >= 350)) | (replay == 7),
            [200, 150, 500],
        ),
    ],
    ids=["overlapping-parts", "parts-across-an-off-time"],
)
def test_replays_cut_by_the_gates_turns_stay_apart(tmp_path, kept, sizes):
    got, came_from = _replays_in_part(tmp_path, kept)
    assert got == sizes + [0] * (10 - len(sizes))
    assert all(len(c) == 1 for c in came_from[: len(sizes)]), came_from
    assert [c[0] for c in came_from[: len(sizes)]] == sorted(c[0] for c in came_from[: len(sizes)])


def test_replays_in_part_are_not_fooled_by_an_end_stamped_late(tmp_path):
    # One wave a replay (no clean gap inside one); replay 2 recorded in part (its last
    # 300 blocks), then 3 and 4 whole, and one of replay 2's ends stamped by replay 3's
    # last exits without a flag, which hides every clean gap until replay 4: the gap
    # between starts still parts them.
    def stamp_late(ev, replay, rank):
        ev["time_end"][(replay == 2) & (rank == 499)] = ev["time_end"][replay == 3].max()

    got, came_from = _replays_in_part(
        tmp_path, lambda replay, rank: ((replay == 2) & (rank >= 200)) | (replay > 2), 5, resident=64, touch=stamp_late
    )
    assert got == [300, 500, 500, 0, 0]
    assert came_from == [[2], [3], [4], [], []]


@pytest.mark.parametrize("paused_at", [30, 250, 470])
def test_a_long_pause_inside_a_replay_does_not_part_it(tmp_path, paused_at):
    # Seen on the H100 (test_duty_cycle_from_the_host_counts_every_block[block_trace]):
    # a replay paused for 10 ms midway (the program or the tool held it up) looked like
    # an off time between replays, one more part than launches listed (IndexError).
    # A block seen again begins a replay for sure; a long gap parts replays only while
    # fewer are found than listed.
    def kept(replay, rank):
        return ~((replay == 0) & (rank == 0))  # one block dropped: the split with blocks missing

    ev, launches = synthetic.block_trace_events(10, 500, sm_count=16, gap_ns=2_000)
    replay, rank = _replay_and_rank(ev, 500)
    later = (replay > 3) | ((replay == 3) & (rank >= paused_at))
    ev["time_start"][later] += 10_000_000
    ev["time_end"][later] += 10_000_000
    ev["grid_id"] = 77
    launches["grid_id"] = 77
    launches["flags"] = 1
    keep = kept(replay, rank)
    _, of = _one_window(tmp_path / "p.gpuobs", launches, ev[keep])
    assert (of >= 0).all()
    assert np.bincount(of, minlength=10).tolist() == [499] + [500] * 9
    assert [sorted(set(replay[keep][of == i].tolist())) for i in range(10)] == [[r] for r in range(10)]


def test_replays_under_gates_drops_and_pauses_keep_each_block_once_a_launch():
    # Random graph replays of one node, with pauses (up to 20 ms) at random points,
    # a gate turning on a random period and random drops: every event goes to one of
    # the listed launches and no launch gets the same block twice (before the fix,
    # 62 of 400 such cases raised IndexError and 57 gave a launch a block twice).
    from gpuobs.analysis.launches import _split_replays

    for seed in range(150):
        rng = np.random.default_rng(seed)
        k, blocks = int(rng.integers(2, 12)), int(rng.integers(4, 300))
        ev, _ = synthetic.block_trace_events(k, blocks, sm_count=int(rng.integers(2, 32)), gap_ns=2_000, seed=seed)
        replay, rank = _replay_and_rank(ev, blocks)
        for _ in range(int(rng.integers(0, 4))):
            r, q = int(rng.integers(0, k)), int(rng.integers(0, blocks))
            later = (replay > r) | ((replay == r) & (rank >= q))
            pause = int(rng.integers(10_000, 20_000_000))
            ev["time_start"][later] += pause
            ev["time_end"][later] += pause
        t = ev["time_start"].astype(np.int64)
        period = int(rng.integers(10_000, max(20_000, (t.max() - t.min()) // 2 + 1)))
        keep = ((t - t.min() + int(rng.integers(0, period))) % period) < int(rng.integers(1, period))
        keep &= rng.random(len(ev)) > rng.random() * 0.3
        if not keep.any() or keep.all():
            continue
        kept = ev[keep]
        out = np.full(len(kept), -1, np.int64)
        _split_replays(kept, np.arange(len(kept)), np.arange(k), out, np.full(k, blocks))
        assert ((out >= 0) & (out < k)).all(), seed
        for i in range(k):
            x = kept["block_x"][out == i]
            assert len(np.unique(x)) == len(x), (seed, i)


def test_replays_with_dropped_blocks_split_one_per_launch(tmp_path):
    rng = np.random.default_rng(1)
    got, came_from = _replays_in_part(tmp_path, lambda replay, rank: rng.random(len(replay)) > 0.1)
    assert came_from == [[r] for r in range(10)]
    assert all(400 < n < 500 for n in got), got


def test_replays_sharing_a_grid_id_across_a_raced_flush(tmp_path):
    # 3 replays of one node ran in window 0, but the last launch record raced
    # the flush and was listed in window 1: the split must still give each its own.
    ev, launches = synthetic.block_trace_events(3, 500, sm_count=16, gap_ns=2_000)
    ev["grid_id"] = 77
    launches["grid_id"] = 77
    launches["flags"] = 1
    late = launches[2:].copy()
    late["flags"] |= 2
    path = tmp_path / "rr.gpuobs"
    with RecordingWriter(path) as w:
        w.launches(launches[:2])
        w.flush(flush_seq=0, attempted=len(ev), recorded=len(ev), dropped=0)
        w.events(ev, flush_seq=0)
        w.launches(late)
        w.flush(flush_seq=1, attempted=0, recorded=0, dropped=0)
    rec = gpuobs.load(path)
    of = analysis.launch_index_of_events(rec)
    assert np.bincount(of).tolist() == [500, 500, 500]


def test_launch_that_raced_a_flush_is_found_in_the_next_window(tmp_path):
    ev, launches = synthetic.block_trace_events(2, 100, sm_count=8)
    path = tmp_path / "r.gpuobs"
    with RecordingWriter(path) as w:
        w.launches(launches[:1])
        w.flush(flush_seq=0, attempted=200, recorded=200, dropped=0)
        w.events(ev, flush_seq=0)  # the second launch's blocks ran during flush 0 ...
        raced = launches[1:].copy()
        raced["flags"] = 2
        w.launches(raced)  # ... but its launch record went to flush 1
        w.flush(flush_seq=1, attempted=0, recorded=0, dropped=0)
    rec = gpuobs.load(path)
    assert rec.launch_flushes.tolist() == [0, 1]
    of = analysis.launch_index_of_events(rec)
    assert (of >= 0).all() and np.bincount(of).tolist() == [100, 100]


def test_launch_cut_while_running_keeps_its_blocks_from_the_next_window(tmp_path):
    """A cut that is not at a quiet point lists a launch that may still run
    (flagged RACED_FLUSH): its blocks that ran past the cut are in the next window."""
    ev, launches = synthetic.block_trace_events(2, 100, sm_count=8)
    second = ev["grid_id"] == launches["grid_id"][1]
    path = tmp_path / "c.gpuobs"
    with RecordingWriter(path) as w:
        listed = launches.copy()
        listed["flags"][1] = 2
        w.launches(listed)  # both listed in window 0; the second was still running
        early = ~second | (np.cumsum(second) <= 40)
        w.flush(flush_seq=0, attempted=int(early.sum()), recorded=int(early.sum()), dropped=0)
        w.events(ev[early], flush_seq=0)
        w.flush(flush_seq=1, attempted=int((~early).sum()), recorded=int((~early).sum()), dropped=0)
        w.events(ev[~early], flush_seq=1)  # its last 60 blocks fell past the cut
    rec = gpuobs.load(path)
    assert rec.launch_flushes.tolist() == [0, 0]
    of = analysis.launch_index_of_events(rec)
    assert (of >= 0).all() and np.bincount(of).tolist() == [100, 100]


def test_summary_counts(block_recording):
    s = analysis.summary(gpuobs.load(block_recording))
    assert s["launches"] == 12 and s["block_events"] == 12 * 1024 and s["dropped"] == 0
    assert s["mode"] == "block_trace" and s["complete"]


def test_flagged_ends_do_not_stretch_their_launch(tmp_path):
    ev, launches = synthetic.block_trace_events(2, 200, sm_count=8, gap_ns=5_000)
    true_end = int(ev["time_end"][:200].max())
    ev["time_end"][0] = int(ev["time_end"].max()) + 1_000_000  # stamped by a later replay
    ev["flags"][0] |= schema.BLOCK_END_UNCONFIRMED
    path = tmp_path / "f.gpuobs"
    with RecordingWriter(path) as w:
        w.launches(launches)
        w.flush(attempted=len(ev), recorded=len(ev), dropped=0, unconfirmed_ends=1)
        w.events(ev)
    rec = gpuobs.load(path)
    of = analysis.launch_index_of_events(rec)
    table = analysis.launch_table(rec, of)
    first = of[0]
    assert table.ends_unconfirmed[first] == 1 and table.ends_unconfirmed.sum() == 1
    assert int(table.last_end[first]) <= max(true_end, int(ev["time_start"][0]))
    from gpuobs.perfetto_export.export import export

    from .trace_decode import decode

    export([rec], tmp_path / "f.pftrace")
    d = decode(tmp_path / "f.pftrace")
    kernels = [s for s in d.slices if d.tracks[s[0]].name == "Kernels"]
    assert sorted(s[4].get("ends_unconfirmed", 0) for s in kernels) == [0, 1]


WHILE_GRAPH = Path(__file__).resolve().parent / "data" / "while_graph_block_trace.gpuobs"


def test_conditional_body_replays_split_by_the_replays_other_kernels():
    # A real recording (H100, 2026-12-06, tests/gpu_programs/while_graph.cu: a kernel,
    # then a WHILE node whose body runs loop_body (96 blocks) and loop_condition 5
    # times; 4 replays, three in one flush window). Every run shares one grid id and
    # each run's ends are stamped by the next run's early exits, so the gaps between
    # runs cut as well as those between replays: the split by gaps gave loop_body
    # 480, 1, 575, 864 blocks. The kernel before the loop anchors each replay.
    rec = gpuobs.load(WHILE_GRAPH)
    table = analysis.launch_table(rec)
    for kernel, per_replay in (("before_loop", 48), ("loop_body", 96 * 5), ("loop_condition", 5)):
        rows = [i for i, name in enumerate(table.name) if kernel in name]
        assert table.blocks_recorded[rows].tolist() == [per_replay] * 4, kernel


def _while_replays(anchor_first: bool):
    """3 replays in one window of a graph with one anchor kernel (8 blocks) and a
    body kernel (4 blocks) run 3 times: anchor before or after the loop. Every
    body run's ends are stamped by the next run (unflagged), the way a real body's
    are, and the device takes 40 us before the third run (a long condition): the
    widest gap between a body's starts lies inside a replay, not between two."""
    rows, t = [], 1_000_000
    for replay in range(3):
        parts = ["anchor", "body", "body", "body"] if anchor_first else ["body", "body", "body", "anchor"]
        for step, part in enumerate(parts):
            n = 8 if part == "anchor" else 4
            rows += [(part, replay, t + i * 10) for i in range(n)]
            t += 40_000 if (step == 2 and anchor_first) or (step == 1 and not anchor_first) else 10_000
        t += 3_000
    ev = np.zeros(len(rows), schema.EVENT_DTYPE)
    ev["kind"] = schema.EventKind.BLOCK
    ev["grid_id"] = [5 if part == "anchor" else 7 for part, _, _ in rows]
    ev["time_start"] = [start for _, _, start in rows]
    ev["time_end"] = ev["time_start"] + 12_000  # past the next run's start
    ev["thread_index"] = ev["exit_count"] = 32
    _, launches = synthetic.block_trace_events(6, 4, sm_count=4)
    body_flag = schema.LaunchFlag.CONDITIONAL_BODY
    for replay in range(3):
        anchor, body = (
            launches[2 * replay : 2 * replay + 2] if anchor_first else launches[2 * replay : 2 * replay + 2][::-1]
        )
        anchor["grid_id"], body["grid_id"] = 5, 7
        anchor["grid"], body["grid"] = (8, 1, 1), (4, 1, 1)
        anchor["flags"], body["flags"] = 1, 1 | body_flag
        anchor["graph_launch_id"] = body["graph_launch_id"] = 100 + replay
    launches["launch_id"] = np.arange(1, 7)
    return ev, launches, [replay for _, replay, _ in rows]


@pytest.mark.parametrize("anchor_first", [True, False], ids=["anchor-before-loop", "anchor-after-loop"])
def test_conditional_body_runs_go_to_the_replay_their_anchor_says(tmp_path, anchor_first):
    ev, launches, replay_of = _while_replays(anchor_first)
    rec, of = _one_window(tmp_path / "w.gpuobs", launches, ev)
    assert (rec.launches["graph_launch_id"][of] - 100).tolist() == replay_of
