"""`gpuobs record` works out the summary's numbers of the chunks that grow with a run
(launch rows, launch counts, API calls) while the program writes them, so its finish
does not grow with the run: the summary with the follower's facts is the summary
without them, however the file was cut while it was followed, and facts of another
file, another chunk or a damaged one are never used."""

import subprocess
import sys
import time

import numpy as np
import pytest

from gpuobs.analysis.launches import summary
from gpuobs.record.chunk_facts import FactsCache
from gpuobs.record.finish import events_by_kind, read_without_events, summarise
from gpuobs.record.follower import Follower
from gpuobs.recording_file import chunk_walk, schema, synthetic
from gpuobs.recording_file.fileformat import CHUNK_HEADER, FILE_HEADER
from gpuobs.recording_file.reader import CHUNK_HEAD

from .cli_helpers import fake_toolchain, gpuobs_cmd, repo_env

Flag = schema.LaunchFlag
COMPARED = (
    "launches",
    "device_launches",
    "conditional_body_launches",
    "functions",
    "modules_patched",
    "counted",
    "attempted",
    "recorded",
    "dropped",
    "unrecorded_launches",
    "block_events",
    "memory_events",
    "flushes",
    "complete",
    "notices",
)


def write_serving_run(path, replays=60, nodes=37, flushes=12, pack=True):
    """A decode loop's recording as the tool writes it: launch rows and counts per flush
    (some launched by kernels, some in a conditional body, some sharing a counter slot),
    API calls, events, a notice; returns its path."""
    launches, counts = synthetic.graph_replay_tables(replays, nodes)
    launches["flags"][::7] |= np.uint32(Flag.FROM_DEVICE)
    launches["flags"][::11] |= np.uint32(Flag.CONDITIONAL_BODY)
    table = schema.LAUNCH_TABLE_SIZE
    shared = np.arange(5, len(counts), 50)  # each shares its slot with the launch before it
    counts["grid_id"][shared] = counts["grid_id"][shared - 1] + np.uint64(table)
    counts["count"][shared] = counts["count"][shared - 1] = 1000
    counts["launches_sharing"][shared] = counts["launches_sharing"][shared - 1] = 2
    calls = np.zeros(40, schema.dtype("gpuobs_api_call"))
    calls["enter_ns"] = synthetic.UPTIME_NS + np.arange(40) * 1000
    calls["exit_ns"] = calls["enter_ns"] + 500
    synthetic.write_graph_replay_recording(
        path,
        launches,
        counts,
        flushes,
        pack=pack,
        dropped=3,
        events_per_flush=5,
        api_calls=calls,
        notice="a notice the summary says again",
    )
    return path


def summary_of_the_tables(path) -> dict:
    """What record printed before the follower: the launch rows and counts loaded."""
    rec, events = read_without_events(path)
    s = summary(rec)
    s["block_events"], s["memory_events"] = events_by_kind(rec, events)
    s["api_calls"] = len(rec.api_calls)
    return s


def same(a: dict, b: dict) -> None:
    for key in COMPARED + ("api_calls",):
        assert a[key] == b[key], key


@pytest.mark.parametrize("pack", [True, False])
def test_the_summary_is_that_of_the_tables(tmp_path, pack):
    path = write_serving_run(tmp_path / "r.gpuobs", pack=pack)
    rec, s = summarise(path)
    same(s, summary_of_the_tables(path))
    assert s["device_launches"] > 0 and s["conditional_body_launches"] > 0 and s["api_calls"] == 120
    assert s["chunks_from_follower"] == 0 and s["growing_chunks"] == 3 * 12
    assert len(rec.launches) == 0 and len(rec.launch_counts) == 0  # not read: the facts stand for them


def test_slots_shared_by_launches_count_once(tmp_path):
    path = write_serving_run(tmp_path / "r.gpuobs")
    _, counts = synthetic.graph_replay_tables(60, 37)
    per = len(counts) // 12
    shared = np.arange(5, 12 * per, 50)
    in_one_window = int((shared // per == (shared - 1) // per).sum())  # (555 and 554 are two windows')
    assert 0 < in_one_window < len(shared)
    written = counts["count"][: 12 * per].astype(np.int64)
    written[shared] = written[shared - 1] = 1000
    _, s = summarise(path)
    assert s["counted"] == int(written.sum()) - 1000 * in_one_window
    assert s["counted"] == summary_of_the_tables(path)["counted"]


def test_the_python_walk_gives_the_same_summary(tmp_path, monkeypatch):
    path = write_serving_run(tmp_path / "r.gpuobs")
    _, walked_in_c = summarise(path)
    monkeypatch.setattr(chunk_walk, "library", lambda: None)
    _, walked_in_python = summarise(path)
    same(walked_in_c, walked_in_python)


def grown(source, path, cuts, follower):
    """`source`'s bytes appended to `path` up to each cut in turn, the follower looking after each."""
    data = source.read_bytes()
    with open(path, "wb") as out:
        for cut in cuts + [len(data)]:
            out.write(data[out.tell() : cut])
            out.flush()
            follower.look()


def test_followed_while_written_at_any_cut_the_summary_is_the_same(tmp_path):
    source = write_serving_run(tmp_path / "whole.gpuobs")
    expected = summary_of_the_tables(source)
    size = source.stat().st_size
    rng = np.random.default_rng(7)
    for trial in range(6):
        out = tmp_path / f"followed{trial}.gpuobs"
        follower = Follower(out)
        cuts = sorted(rng.integers(1, size, 25).tolist())  # mid-header and mid-chunk cuts among them
        grown(source, out, cuts, follower)
        follower.stop()
        cache = follower.cache_for(out)
        assert cache is not None and cache.until == size and not follower.stuck
        _, s = summarise(out, cache)
        same(s, expected)
        assert s["chunks_from_follower"] == s["growing_chunks"] == 36


def test_what_landed_after_the_last_look_is_read_at_the_exit(tmp_path):
    source = write_serving_run(tmp_path / "whole.gpuobs")
    out = tmp_path / "r.gpuobs"
    follower = Follower(out)
    data = source.read_bytes()
    out.write_bytes(data[: len(data) // 2])
    follower.look()
    out.write_bytes(data)
    follower.stop()
    _, s = summarise(out, follower.cache_for(out))
    same(s, summary_of_the_tables(source))
    assert 0 < s["chunks_from_follower"] < s["growing_chunks"]


def test_facts_of_another_file_by_that_name_are_not_used(tmp_path):
    first = write_serving_run(tmp_path / "r.gpuobs", replays=60)
    follower = Follower(first)
    follower.look()
    follower.stop()
    cache = follower.cache_for(first)
    assert cache is not None and len(cache.chunks) == 36
    first.unlink()  # a new file at the path (another inode), laid out alike
    second = write_serving_run(tmp_path / "r.gpuobs", replays=72)
    _, s = summarise(second, cache)
    assert s["chunks_from_follower"] == 0
    same(s, summary_of_the_tables(second))


def test_facts_of_another_chunk_at_that_offset_are_not_used(tmp_path):
    path = write_serving_run(tmp_path / "r.gpuobs")
    follower = Follower(path)
    follower.look()
    follower.stop()
    cache = follower.cache_for(path)
    offset, (header, facts) = next(iter(cache.chunks.items()))
    assert cache.get(offset, header) is facts
    ctype, flags, length, crc = header
    assert cache.get(offset, (ctype, flags, length, crc ^ 1)) is None
    assert cache.get(offset + 1, header) is None
    # A lying cache entry (the right header, wrong facts) would be used: the key is the chunk itself.
    assert FactsCache(identity=cache.identity).get(offset, header) is None


def first_growing_chunk(path, ctype) -> int:
    data = path.read_bytes()
    at = FILE_HEADER.itemsize
    while at < len(data):
        t, _flags, length, _crc = CHUNK_HEAD.unpack_from(data, at)
        if t == ctype:
            return at
        at += CHUNK_HEADER.itemsize + length
    raise AssertionError("no such chunk")


@pytest.mark.parametrize("ctype", [schema.ChunkType.LAUNCHES, schema.ChunkType.FLUSH])
def test_a_damaged_chunk_stops_the_follower_and_is_said_at_the_exit(tmp_path, ctype):
    path = write_serving_run(tmp_path / "r.gpuobs")
    at = first_growing_chunk(path, ctype)
    data = bytearray(path.read_bytes())
    data[at + CHUNK_HEADER.itemsize + 30] ^= 0x5A  # its CRC fails
    path.write_bytes(bytes(data))
    follower = Follower(path)
    follower.look()
    follower.stop()
    assert path in follower.stuck and follower.cache_for(path).until == at
    rec, s = summarise(path, follower.cache_for(path))
    cold_rec, _ = read_without_events(path)
    assert rec.damage is not None and rec.damage.offset == cold_rec.damage.offset == at
    assert "CRC-32" in rec.damage.reason and s["launches"] == len(cold_rec.launches)


def test_a_file_that_is_not_a_recording_is_not_followed(tmp_path):
    path = tmp_path / "r.gpuobs"
    path.write_bytes(b"not a recording, but long enough to hold a header" * 10)
    follower = Follower(path)
    follower.look()
    follower.stop()
    assert follower.cache_for(path) is None and follower.error is None


def test_the_thread_follows_the_output_and_children_as_they_are_written(tmp_path):
    source = write_serving_run(tmp_path / "whole.gpuobs")
    data = source.read_bytes()
    out, child = tmp_path / "run.gpuobs", tmp_path / "run.4243.gpuobs"
    follower = Follower(out, every_s=0.02)
    follower.start()
    with open(out, "wb") as a, open(child, "wb") as b:
        for cut in range(0, len(data), len(data) // 20):
            for f in (a, b):
                f.write(data[f.tell() : cut])
                f.flush()
            time.sleep(0.05)
        for f in (a, b):
            f.write(data[f.tell() :])
    time.sleep(0.3)
    follower.stop()
    assert follower.error is None and follower.looks > 5
    for path in (out, child):
        _, s = summarise(path, follower.cache_for(path))
        same(s, summary_of_the_tables(source))
        assert s["chunks_from_follower"] == s["growing_chunks"]


def test_no_facts_while_the_thread_still_runs(tmp_path):
    source = write_serving_run(tmp_path / "whole.gpuobs")
    path = tmp_path / "r.gpuobs"
    follower = Follower(path, every_s=0.01)
    follower.start()
    path.write_bytes(source.read_bytes())
    time.sleep(0.1)
    assert follower.cache_for(path) is None  # not settled: the exit reads it all itself
    follower.stop()
    assert follower.cache_for(path) is not None


# The program writes a recording over a second and a half, a chunk at a time, as the tool does.
SLOW_WRITER = r"""
import os, sys, time
data = open(sys.argv[1], "rb").read()
with open(os.environ["GPUOBS_OUTPUT"], "wb") as out:
    step = len(data) // 30
    for at in range(0, len(data), step):
        out.write(data[at : at + step])
        out.flush()
        time.sleep(0.05)
"""


def test_record_summarises_what_it_followed(tmp_path):
    from gpuobs.record.native_build import sanitizer_dirs

    if not sanitizer_dirs():
        pytest.skip("no sanitizer headers (the test extra installs them)")
    source = write_serving_run(tmp_path / "whole.gpuobs", replays=300)
    writer = tmp_path / "writer.py"
    writer.write_text(SLOW_WRITER)
    out = tmp_path / "r.gpuobs"
    env = repo_env(**fake_toolchain(tmp_path), GPUOBS_DEBUG="1")
    r = subprocess.run(
        gpuobs_cmd("record", "-o", str(out), "--", sys.executable, str(writer), str(source)),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == source.read_bytes()
    line = next(x for x in r.stderr.splitlines() if "launches of" in x)
    expected = summary_of_the_tables(source)
    assert f"{expected['launches']} launches" in line and f"counted {expected['counted']:,}" in line
    debug = next(x for x in r.stderr.splitlines() if x.startswith(f"gpuobs: summary of {out}"))
    read_while_running = int(debug.split(": ")[2].split(" of ")[0].replace(",", ""))
    assert read_while_running > 0, debug  # the writer took 1.5 s, the follower looks every 0.5 s


def test_files_of_the_pattern_from_before_the_run_are_not_followed(tmp_path):
    source = write_serving_run(tmp_path / "whole.gpuobs")
    out, trimmed = tmp_path / "run.gpuobs", tmp_path / "run.2.gpuobs"  # a trimmed copy an earlier session left
    trimmed.write_bytes(source.read_bytes())
    follower = Follower(out, every_s=0.01)
    follower.start()
    out.write_bytes(source.read_bytes())
    time.sleep(0.2)
    follower.stop()
    assert follower.cache_for(trimmed) is None and follower.cache_for(out) is not None


def test_a_follower_without_a_thread_leaves_the_exit_to_read_it_all(tmp_path, monkeypatch):
    import threading

    def no_thread(*_args, **_kwargs):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    path = write_serving_run(tmp_path / "r.gpuobs")
    follower = Follower(path)
    follower.start()  # fails open
    follower.stop()
    assert follower.cache_for(path) is None and "can't start new thread" in follower.error
    _, s = summarise(path, follower.cache_for(path))
    same(s, summary_of_the_tables(path))


def test_a_bad_value_ends_what_is_kept_as_the_reader_salvages(tmp_path):
    from gpuobs.recording_file.reader import load

    path = write_serving_run(tmp_path / "r.gpuobs", pack=False)
    at = first_growing_chunk(path, schema.ChunkType.LAUNCHES)
    data = bytearray(path.read_bytes())
    row = np.frombuffer(
        bytes(data[at + CHUNK_HEADER.itemsize : at + CHUNK_HEADER.itemsize + 80]), schema.dtype("gpuobs_launch")
    ).copy()
    row["function_slot"] = 0xFFFFFFFF  # no tool writes it; the CRC is made to hold
    data[at + CHUNK_HEADER.itemsize : at + CHUNK_HEADER.itemsize + 80] = row.tobytes()
    from gpuobs.recording_file.fileformat import CRC_COVERED_HEADER_BYTES, chunk_crc

    _t, _f, length, _c = CHUNK_HEAD.unpack_from(data, at)
    payload = bytes(data[at + CHUNK_HEADER.itemsize : at + CHUNK_HEADER.itemsize + length])
    crc = chunk_crc(bytes(data[at : at + CRC_COVERED_HEADER_BYTES]), payload)
    data[at + 16 : at + 20] = crc.to_bytes(4, "little")
    path.write_bytes(bytes(data))
    rec, s = summarise(path)
    full = load(path, salvage=True)
    assert rec.damage.offset == full.damage.offset == at and "function_slot" in rec.damage.reason
    assert s["launches"] == len(full.launches) == 0
