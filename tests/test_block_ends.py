"""Block-end bounds of block_starts recordings (gpuobs.analysis.block_ends): against
the true ends of a simulated scheduler, against a plain-Python reading of the rules,
and on hand-made cases where each rule must hold or must not apply."""

import numpy as np
import pytest

import gpuobs
from gpuobs.analysis import block_ends as be
from gpuobs.analysis import launches as analysis
from gpuobs.analysis.block_ends import EndBound
from gpuobs.recording_file import schema, synthetic
from gpuobs.recording_file.recording_writer import RecordingWriter

BASE = synthetic.GLOBALTIMER_BASE
INCOMPLETE = schema.constant("GPUOBS_BLOCK_SLOTS_INCOMPLETE")
NODE = schema.LaunchFlag.GRAPH_NODE | schema.LaunchFlag.FROM_NODE_TABLE


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """Two GPUs simulated from the same device time: the same SM ids and slots are
    busy on both at once, so bounds that mixed devices would come out early."""
    path, truth = synthetic.write_block_starts_recording(tmp_path_factory.mktemp("bs") / "r.gpuobs", devices=2)
    rec = gpuobs.load(path)
    return rec, be.block_end_bounds(rec), truth


def _true_ends(rec, ends, truth):
    def key(device, grid, x):
        return (np.asarray(device, np.uint64) << np.uint64(48)) | (np.asarray(grid, np.uint64) << np.uint64(20)) | x

    ev = rec.events
    have = key(truth["device_index"], truth["grid_id"], truth["block_x"].astype(np.uint64))
    want = key(rec.event_devices[ends.rows], ev["grid_id"][ends.rows], ev["block_x"][ends.rows].astype(np.uint64))
    order = np.argsort(have)
    at = order[np.searchsorted(have[order], want)]
    assert (have[at] == want).all()
    return truth["time_end"][at]


def test_the_simulated_scheduler_keeps_the_measured_slot_rule(simulated):
    """What the bounds rest on, in the generator itself: on each SM, a slot's next
    block starts after the block before it in that slot has ended."""
    rec, ends, truth = simulated
    end = _true_ends(rec, ends, truth)
    ev = rec.events
    layers = be.held_slots(ev["address"][ends.rows])
    holder, slot = np.concatenate([r for r, _ in layers]), np.concatenate([s for _, s in layers])
    group = (rec.event_devices[ends.rows][holder].astype(np.int64) * 1024 + ev["sm_id"][ends.rows][holder]) * 64 + slot
    order = np.lexsort((ev["time_start"][ends.rows][holder], group))
    same = group[order][1:] == group[order][:-1]
    assert same.sum() > 1000
    assert (ev["time_start"][ends.rows][holder][order][1:][same] > end[holder][order][:-1][same]).all()
    consecutive = 0
    for mask in ev["address"][ends.rows]:
        bits = [b for b in range(64) if int(mask) >> b & 1]
        consecutive += bits == list(range(bits[0], bits[0] + len(bits)))
    assert consecutive < 0.8 * len(ends.rows)  # a block's warps do not take consecutive slots


def test_every_bound_is_at_or_after_the_true_end(simulated):
    rec, ends, truth = simulated
    end = _true_ends(rec, ends, truth)
    bounded = ends.quality != EndBound.NONE
    assert (ends.end_bound_ns[bounded] >= end[bounded]).all()
    none = ~bounded
    np.testing.assert_array_equal(ends.end_bound_ns[none], rec.events["time_start"][ends.rows][none])
    # every kind shows up, and slot reuse is tight where it applies
    assert set(np.unique(ends.quality).tolist()) == {int(q) for q in EndBound}
    slot = ends.quality == EndBound.SLOT
    assert np.median(ends.end_bound_ns[slot].astype(np.int64) - end[slot].astype(np.int64)) < 1_000
    # the launch that raced the second flush outlasts that window's quiet point (it is listed in the next)
    raced = np.flatnonzero(rec.launches["flags"] & schema.LaunchFlag.RACED_FLUSH)
    assert len(raced) == 2
    for k in raced:
        mine = ends.launch == k
        device = rec.launches["device_index"][k]
        assert (rec.event_flushes[ends.rows][mine] == 1).all() and rec.launch_flushes[k] == 2
        quiet = rec.slots["device_quiet_ns"][(rec.slots["device_index"] == device) & (rec.slots["flush_seq"] == 1)]
        assert (end[mine] > quiet[0]).sum() >= 4


def test_incomplete_slots_never_give_a_slot_bound(simulated):
    rec, ends, _ = simulated
    flagged = (rec.events["flags"][ends.rows] & INCOMPLETE) != 0
    assert flagged.sum() > 20
    assert not (ends.quality[flagged] == EndBound.SLOT).any()
    warps = (rec.events["thread_index"][ends.rows].astype(np.int64) + 31) // 32
    assert (ends.slots_known[flagged] < warps[flagged]).all()
    assert (ends.slots_known[~flagged] == warps[~flagged]).all()


def _reference(rec):
    """The rules of block_ends.py, read one block at a time (for comparison only)."""
    ev = rec.events
    dev = rec.event_devices
    of = analysis.launch_index_of_events(rec)
    launches = rec.launches
    rows = [i for i in range(len(ev)) if ev["kind"][i] == schema.EventKind.BLOCK]
    starts_in = {}  # (device, sm, slot) -> starts
    for i in rows:
        for b in range(64):
            if int(ev["address"][i]) >> b & 1:
                starts_in.setdefault((int(dev[i]), int(ev["sm_id"][i]), b), []).append(int(ev["time_start"][i]))
    first_start, last_start = {}, {}
    for i in rows:
        if of[i] >= 0:
            first_start[int(of[i])] = min(first_start.get(int(of[i]), 1 << 64), int(ev["time_start"][i]))
            last_start[int(of[i])] = max(last_start.get(int(of[i]), 0), int(ev["time_start"][i]))
    quiet = {(int(s["device_index"]), int(s["flush_seq"])): int(s["device_quiet_ns"]) for s in rec.slots}
    out = []
    for i in rows:
        start = int(ev["time_start"][i])
        candidates = []
        bits = [b for b in range(64) if int(ev["address"][i]) >> b & 1]
        warps = (int(ev["thread_index"][i]) + 31) // 32
        if bits and not int(ev["flags"][i]) & INCOMPLETE and len(bits) >= warps:
            nexts = [
                min([t for t in starts_in[(int(dev[i]), int(ev["sm_id"][i]), b)] if t > start], default=None)
                for b in bits
            ]
            if None not in nexts:
                candidates.append((max(nexts), EndBound.SLOT))
        k = int(of[i])
        if k >= 0:
            later = [
                j
                for j in first_start
                if launches["device_index"][j] == launches["device_index"][k]
                and launches["stream_id"][j] == launches["stream_id"][k]
                and launches["launch_id"][j] > launches["launch_id"][k]
            ]
            if later:
                j = min(later, key=lambda j: int(launches["launch_id"][j]))
                plain = not (int(launches["flags"][k]) & be.NOT_PLAIN or int(launches["flags"][j]) & be.NOT_PLAIN)
                if plain and first_start[j] >= last_start[k]:
                    candidates.append((first_start[j], EndBound.STREAM))
            q = quiet.get((int(launches["device_index"][k]), int(rec.launch_flushes[k])), 0)
            if q:
                candidates.append((q, EndBound.QUIET))
        candidates = [c for c in candidates if c[0] >= start]
        out.append(min(candidates, key=lambda c: (c[0], c[1])) if candidates else (start, EndBound.NONE))
    return np.array(rows), np.array([c[0] for c in out], np.uint64), np.array([int(c[1]) for c in out])


def test_the_vectorised_bounds_follow_the_rules_one_block_at_a_time(tmp_path):
    path, _ = synthetic.write_block_starts_recording(tmp_path / "r.gpuobs", seed=3, sm_count=4)
    rec = gpuobs.load(path)
    ends = be.block_end_bounds(rec)
    rows, end, quality = _reference(rec)
    np.testing.assert_array_equal(ends.rows, rows)
    np.testing.assert_array_equal(ends.quality, quality)
    np.testing.assert_array_equal(ends.end_bound_ns, end)


# -- hand-made recordings: one rule at a time ----------------------------------------------


def _block(t, slots, sm=0, grid=1001, x=0, threads=None, flags=0):
    e = np.zeros(1, schema.EVENT_DTYPE)
    e["time_start"], e["grid_id"], e["block_x"], e["sm_id"], e["sm_id_end"] = BASE + t, grid, x, sm, sm
    e["address"] = sum(1 << s for s in slots)
    e["thread_index"] = threads if threads is not None else 32 * len(slots)
    e["flags"], e["kind"] = flags, schema.EventKind.BLOCK
    return e


def _launch(launch_id, grid, stream=7, flags=0, device=0):
    row = np.zeros(1, schema.dtype("gpuobs_launch"))
    row["launch_id"], row["grid_id"], row["stream_id"], row["flags"] = launch_id, grid, stream, flags
    row["device_index"], row["grid"], row["block"] = device, (4, 1, 1), (32, 1, 1)
    return row


def _bounds(tmp_path, windows, name="h.gpuobs"):
    """windows: per flush window (device, launches, events, quiet ns from BASE or None)."""
    path = tmp_path / name
    with RecordingWriter(path) as w:
        w.run(mode=schema.Mode.BLOCK_STARTS)
        seqs = {}
        for device, launches, events, quiet in windows:
            seq = seqs[device] = seqs.get(device, -1) + 1
            launches = np.concatenate(launches) if launches else np.zeros(0, schema.dtype("gpuobs_launch"))
            events = np.concatenate(events) if events else np.zeros(0, schema.EVENT_DTYPE)
            w.launches(launches)
            w.flush(device_index=device, flush_seq=seq, attempted=len(events), recorded=len(events), dropped=0)
            w.slots(device_index=device, flush_seq=seq, device_quiet_ns=0 if quiet is None else BASE + quiet)
            w.events(events, device_index=device, flush_seq=seq)
    rec = gpuobs.load(path)
    ends = be.block_end_bounds(rec)
    ev = rec.events[ends.rows]
    return {
        (int(d), int(g), int(x)): (int(e) - BASE, EndBound(q))
        for d, g, x, e, q in zip(
            rec.event_devices[ends.rows], ev["grid_id"], ev["block_x"], ends.end_bound_ns, ends.quality
        )
    }


def test_only_the_same_slot_of_the_same_sm_and_device_bounds(tmp_path):
    one = [_launch(1, 1001)]
    found = _bounds(
        tmp_path,
        [
            (0, one, [_block(100, [3]), _block(200, [4], x=1), _block(210, [3], sm=1, x=2)], None),
            (1, [_launch(2, 1001, device=1)], [_block(150, [3])], None),
        ],
    )
    assert found[(0, 1001, 0)] == (100, EndBound.NONE)  # a later block in slot 4, on SM 1, on GPU 1: none bounds it
    found = _bounds(tmp_path, [(0, one, [_block(100, [3]), _block(200, [4], x=1), _block(300, [3], x=2)], None)])
    assert found[(0, 1001, 0)] == (300, EndBound.SLOT)


def test_a_block_is_bounded_by_the_latest_next_start_over_all_its_slots(tmp_path):
    one = [_launch(1, 1001)]
    blocks = [_block(100, [3, 7]), _block(200, [3], x=1), _block(500, [7, 9], x=2)]
    found = _bounds(tmp_path, [(0, one, blocks, None)])
    assert found[(0, 1001, 0)] == (500, EndBound.SLOT)
    found = _bounds(tmp_path, [(0, one, blocks[:2], None)])  # slot 7 never taken again
    assert found[(0, 1001, 0)] == (100, EndBound.NONE)


def test_equal_starts_in_one_slot_bound_neither_block(tmp_path):
    """Two blocks stamped with one start in one slot: which held it first is unknown,
    so both take the next later start; never their own start (nor each other's)."""
    one = [_launch(1, 1001)]
    found = _bounds(tmp_path, [(0, one, [_block(100, [3]), _block(100, [3], x=1), _block(400, [3], x=2)], None)])
    assert found[(0, 1001, 0)] == found[(0, 1001, 1)] == (400, EndBound.SLOT)
    found = _bounds(tmp_path, [(0, one, [_block(100, [3]), _block(100, [3], x=1)], None)])
    assert found[(0, 1001, 0)] == found[(0, 1001, 1)] == (100, EndBound.NONE)


def test_incomplete_slots_give_no_slot_bound(tmp_path):
    one = [_launch(1, 1001)]
    later = [_block(300, [3, 5], x=1)]
    flagged = _bounds(tmp_path, [(0, one, [_block(100, [3], threads=64, flags=INCOMPLETE)] + later, None)])
    assert flagged[(0, 1001, 0)] == (100, EndBound.NONE)
    unflagged = _bounds(tmp_path, [(0, one, [_block(100, [3], threads=64)] + later, None)])  # 2 warps, 1 slot
    assert unflagged[(0, 1001, 0)] == (100, EndBound.NONE)
    complete = _bounds(tmp_path, [(0, one, [_block(100, [3, 5], threads=64)] + later, None)])
    assert complete[(0, 1001, 0)] == (300, EndBound.SLOT)


def test_the_next_plain_launch_on_the_stream_bounds_a_plain_launch(tmp_path):
    launches = [
        _launch(1, 1001),
        _launch(2, 1002, stream=8),  # another stream: no bound for launch 1
        _launch(3, 1003),  # no block recorded: passed over
        _launch(4, 1004),
        _launch(5, 1005, flags=NODE),  # a graph node: bounds no one, and is bounded by no one
        _launch(6, 1006),
    ]
    blocks = [
        _block(100, [1], grid=1001),
        _block(150, [2], grid=1002),
        _block(900, [3], grid=1004),
        _block(950, [4], grid=1004, x=1),
        _block(2000, [5], grid=1005),
        _block(3000, [6], grid=1006),
    ]
    found = _bounds(tmp_path, [(0, launches, blocks, None)])
    assert found[(0, 1001, 0)] == (900, EndBound.STREAM)
    assert found[(0, 1002, 0)] == (150, EndBound.NONE)
    assert found[(0, 1004, 0)] == (900, EndBound.NONE) and found[(0, 1004, 1)] == (950, EndBound.NONE)
    assert found[(0, 1005, 0)] == (2000, EndBound.NONE) and found[(0, 1006, 0)] == (3000, EndBound.NONE)


def test_a_next_kernel_that_starts_early_gives_no_bound(tmp_path):
    """Programmatic dependent launch lets a kernel start before the one before it
    ends; a next start before a block's own start is no bound of its end."""
    found = _bounds(
        tmp_path, [(0, [_launch(1, 1001), _launch(2, 1002)], [_block(500, [1]), _block(400, [2], grid=1002)], None)]
    )
    assert found[(0, 1001, 0)] == (500, EndBound.NONE)


def test_a_next_kernel_that_starts_before_this_ones_last_block_bounds_nothing(tmp_path):
    """Launch ids that do not follow enqueue order (threads sharing a stream) or an
    early dependent launch: the next kernel started before this one's last block
    did, so stream order did not hold, and even the block that started before it
    gets no stream bound."""
    launches = [_launch(1, 1001), _launch(2, 1002)]
    blocks = [_block(100, [1]), _block(500, [2], x=1), _block(300, [3], grid=1002)]
    found = _bounds(tmp_path, [(0, launches, blocks, None)])
    assert found[(0, 1001, 0)] == (100, EndBound.NONE)


def test_the_quiet_point_of_the_window_listing_the_launch(tmp_path):
    """A launch that raced the first flush has its blocks in the first window and is
    listed in the second: the first window's quiet point is not its bound."""
    raced = _launch(2, 1002, stream=9, flags=schema.LaunchFlag.RACED_FLUSH)
    found = _bounds(
        tmp_path,
        [
            (0, [_launch(1, 1001)], [_block(100, [1]), _block(120, [2], grid=1002)], 1_000),
            (0, [raced], [], 5_000),
        ],
    )
    assert found[(0, 1001, 0)] == (1_000, EndBound.QUIET)
    assert found[(0, 1002, 0)] == (5_000, EndBound.QUIET)
    found = _bounds(tmp_path, [(0, [_launch(1, 1001)], [_block(100, [1])], None)])  # not quiet
    assert found[(0, 1001, 0)] == (100, EndBound.NONE)


def test_the_tightest_bound_is_taken_and_named(tmp_path):
    launches = [_launch(1, 1001), _launch(2, 1002)]
    blocks = [_block(100, [1]), _block(300, [1], grid=1002), _block(200, [2], grid=1002, x=1)]
    found = _bounds(tmp_path, [(0, launches, blocks, 250)])
    assert found[(0, 1001, 0)] == (200, EndBound.STREAM)  # stream 200 < quiet 250 < slot 300
    found = _bounds(tmp_path, [(0, launches, blocks, 150)])
    assert found[(0, 1001, 0)] == (150, EndBound.QUIET)
    blocks[2] = _block(400, [2], grid=1002, x=1)
    found = _bounds(tmp_path, [(0, launches, blocks, None)])
    assert found[(0, 1001, 0)] == (300, EndBound.SLOT)  # slot 300 == stream 300: slot named


def test_per_launch_counts_and_kernel_ends(simulated):
    rec, ends, _ = simulated
    counts = be.counts_by_launch(rec, ends)
    assert counts.blocks.sum() == len(ends.rows) and (counts.by_quality.sum(axis=1) == counts.blocks).all()
    table = analysis.launch_table(rec)
    assert table.block_ends is not None and table.end_bound is not None
    for k in range(len(rec.launches)):
        mine = ends.launch == k
        assert int(table.last_end[k]) == int(ends.end_bound_ns[mine].max())
        if (ends.quality[mine] == EndBound.NONE).any():
            assert table.end_bound[k] == EndBound.NONE
        else:
            latest = ends.end_bound_ns[mine] == ends.end_bound_ns[mine].max()
            assert table.end_bound[k] == ends.quality[mine][latest].max()


def test_other_modes_have_no_bounds(block_recording):
    table = analysis.launch_table(gpuobs.load(block_recording))
    assert table.block_ends is None and table.end_bound is None
