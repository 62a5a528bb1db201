"""CRC-valid hostile recordings: any field of any chunk set to any value (edge
values weighted), the CRC recomputed, then the file goes through every command a
user runs on it: info, stats, export, trim (and the trimmed copy back through
load). Each either works or says what is wrong; none may raise anything else
(hypothesis; keep it to a couple of minutes on 2 CI cores)."""

import functools
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import gpuobs
from gpuobs.cli import app
from gpuobs.errors import RecordingError
from gpuobs.recording_file import schema, synthetic
from gpuobs.recording_file.fileformat import CHUNK_HEADER, CRC_COVERED_HEADER_BYTES, FILE_HEADER, chunk_crc
from gpuobs.recording_file.recording_writer import RecordingWriter

EDGES = [
    0,
    1,
    2,
    3,
    31,
    32,
    33,
    255,
    256,
    1023,
    1024,
    1025,
    65535,
    65536,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**62,
    2**63 - 1,
    2**63,
    2**64 - 1,
]
ChunkType = schema.ChunkType


def write_every_chunk(path):
    """A recording with every chunk type, two flush windows, block and memory events, API calls."""
    ev, launches = synthetic.block_trace_events(3, 40, sm_count=8)
    ev["function_slot"] = launches["function_slot"][np.searchsorted(launches["grid_id"], ev["grid_id"])]
    mem = ev[:6].copy()
    mem["kind"] = schema.EventKind.MEMORY
    mem["time_end"], mem["address"], mem["access_size"] = 0, 0x7F0000001000, 4
    calls = np.zeros(4, schema.dtype("gpuobs_api_call"))
    calls["call_id"] = np.arange(1, 5)
    calls["enter_ns"] = synthetic.UPTIME_NS + np.arange(4) * 1000
    calls["exit_ns"] = calls["enter_ns"] + 500
    calls["thread_id"], calls["api_id"], calls["depth"] = 11, (2 << 16) | 7, (0, 1, 0, 1)
    launches["api_call_id"] = (1, 3, 3)
    counts = np.zeros(3, schema.dtype("gpuobs_launch_count"))
    counts["grid_id"], counts["count"], counts["launches_sharing"] = launches["grid_id"], 40, 1
    with RecordingWriter(path) as w:
        w.run(pid=7, mode=schema.Mode.BLOCK_TRACE, argv=["python3", "x.py"])
        w.device(sm_count=8)
        w.module(module_id=1)
        for slot, (mangled, demangled) in enumerate(synthetic.FUNCTION_NAMES):
            w.function(function_slot=slot, mangled=mangled, demangled=demangled)
        w.api_name((2 << 16) | 7, "cudaLaunchKernel")
        w.launches(launches[:2])
        w.clock_samples(synthetic._clock_samples(ev, 568_000))
        w.flush(flush_seq=0, attempted=len(ev), recorded=len(ev), dropped=0, launch_counts=counts[:2])
        quiet = int(ev["time_end"].max()) + 500
        w.slots(flush_seq=0, warp_arrivals=9, warp_arrivals_dropped=1, unmatched_arrivals=2, device_quiet_ns=quiet)
        w.sampling(flush_seq=0, sampled_out=5, budget_bytes_per_s=16_000_000, burst_bytes=1 << 28, gate_turns=1)
        w.events(ev, flush_seq=0)
        w.launches(launches[2:])
        w.flush(flush_seq=1, attempted=len(mem) + 2, recorded=len(mem), dropped=2, launch_counts=counts[2:])
        w.events(mem, flush_seq=1)
        w.api_calls(calls)
        text = b"a module could not be patched"
        notice = np.zeros(1, schema.dtype("gpuobs_notice"))
        notice["code"], notice["monotonic_ns"], notice["text_len"] = schema.NoticeCode.MODULE_UNPATCHED, 5, len(text)
        w._chunk(ChunkType.NOTICE, notice.tobytes() + text)
        w.end(flushes=2, launches=3, events=len(ev) + len(mem))


def chunks(data: bytes):
    off = FILE_HEADER.itemsize
    while off < len(data):
        head = np.frombuffer(data, CHUNK_HEADER, 1, off)[0]
        yield off, int(head["type"]), int(head["length"])
        off += CHUNK_HEADER.itemsize + int(head["length"])


def structs_of(data: bytes, start: int, ctype: int, length: int):
    """(dtype, payload offset, count) of every struct in a chunk's payload."""

    def one(name):
        return [(schema.dtype(name), 0, 1)]

    def array(name):
        return [(schema.dtype(name), 0, length // schema.dtype(name).itemsize)]

    if ctype == ChunkType.FLUSH:
        info = schema.dtype("gpuobs_flush_info")
        count = schema.dtype("gpuobs_launch_count")
        return [(info, 0, 1), (count, info.itemsize, (length - info.itemsize) // count.itemsize)]
    if ctype == ChunkType.EVENTS:
        head = np.frombuffer(data, schema.dtype("gpuobs_events_header"), 1, start)[0]
        return [
            (schema.dtype("gpuobs_events_header"), 0, 1),
            (schema.EVENT_DTYPE, 16 + int(head["padding"]), int(head["count"])),
        ]
    return {
        ChunkType.RUN: one("gpuobs_run_info"),
        ChunkType.DEVICE: one("gpuobs_device_info"),
        ChunkType.FUNCTION: one("gpuobs_function_info"),
        ChunkType.MODULE: one("gpuobs_module_info"),
        ChunkType.LAUNCHES: array("gpuobs_launch"),
        ChunkType.CLOCK: array("gpuobs_clock_sample"),
        ChunkType.API_CALLS: array("gpuobs_api_call"),
        ChunkType.SAMPLING: one("gpuobs_sampling_info"),
        ChunkType.API_NAMES: one("gpuobs_api_name"),
        ChunkType.NOTICE: one("gpuobs_notice"),
        ChunkType.SLOTS: one("gpuobs_slots_info"),
        ChunkType.END: one("gpuobs_end_info"),
    }[ctype]


def scalar_slots(dt: np.dtype):
    """(byte offset, size, signed) of every integer in a struct, subarray elements included."""
    out = []
    for name in dt.names:
        sub, offset = dt.fields[name][:2]
        base, shape = (sub.base, sub.shape) if sub.shape else (sub, ())
        if base.kind not in "ui":
            continue
        for k in range(int(np.prod(shape)) if shape else 1):
            out.append((offset + k * base.itemsize, base.itemsize, base.kind == "i"))
    return out


def mutate(data: bytes, picks, drop=()) -> bytes:
    """Sets fields (picks) and leaves chunks out (drop: indexes into the chunk list),
    every chunk's CRC recomputed: the framing stays valid."""
    buf = bytearray(data)
    table = list(chunks(data))
    for chunk_pick, struct_pick, row_pick, field_pick, value in picks:
        off, ctype, length = table[chunk_pick % len(table)]
        start = off + CHUNK_HEADER.itemsize
        structs = [s for s in structs_of(bytes(buf), start, ctype, length) if s[2] > 0]
        dt, at, count = structs[struct_pick % len(structs)]
        slot_off, size, signed = (slots := scalar_slots(dt))[field_pick % len(slots)]
        pos = start + at + (row_pick % count) * dt.itemsize + slot_off
        v = value % (1 << (8 * size))
        buf[pos : pos + size] = v.to_bytes(size, "little")
        prefix = bytes(buf[off : off + CRC_COVERED_HEADER_BYTES])
        crc = chunk_crc(prefix, bytes(buf[start : start + length]))
        buf[off + 16 : off + 20] = crc.to_bytes(4, "little")
    gone = {table[i % len(table)][0] for i in drop}
    kept = [bytes(buf[off : off + CHUNK_HEADER.itemsize + length]) for off, _, length in table if off not in gone]
    return bytes(buf[: FILE_HEADER.itemsize]) + b"".join(kept)


@functools.lru_cache(maxsize=1)
def block_starts_bytes() -> bytes:
    """A block_starts recording (slot masks, no ends, SLOTS chunks with quiet points)."""
    with tempfile.TemporaryDirectory() as tmp:
        path, _ = synthetic.write_block_starts_recording(Path(tmp) / "block_starts.gpuobs", sm_count=4)
        return path.read_bytes()


@functools.lru_cache(maxsize=1)
def every_chunk_bytes() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "every_chunk.gpuobs"
        write_every_chunk(path)
        return path.read_bytes()


@pytest.fixture
def original():
    return every_chunk_bytes()


def test_the_base_recording_passes_every_command(tmp_path, original):
    path = tmp_path / "r.gpuobs"
    path.write_bytes(original)
    rec = gpuobs.load(path)
    assert {int(t) for _, t, _ in chunks(original)} == {int(t) for t in ChunkType}
    assert len(rec.events) == 126 and len(rec.launches) == 3 and len(rec.api_calls) == 4
    run_every_command(tmp_path, path, expect_ok=True)


def run_every_command(tmp_path, path, expect_ok=False):
    runner = CliRunner()
    out = tmp_path / "t.pftrace"
    trimmed = tmp_path / "trim.gpuobs"
    for args in (
        ["info", str(path)],
        ["stats", str(path)],
        ["export", str(path), "-f", "-o", str(out)],
        ["trim", str(path), "-f", "-o", str(trimmed), "--flushes", "1:"],
        ["info", str(trimmed)],
    ):
        r = runner.invoke(app, args)
        assert r.exception is None or isinstance(r.exception, SystemExit), (args, r.output, r.exception)
        assert "Traceback" not in r.output
        assert r.exit_code in ((0,) if expect_ok else (0, 2)), (args, r.output)
        if args[0] == "trim" and r.exit_code != 0:
            break


pick = st.tuples(
    st.integers(0, 10**6),
    st.integers(0, 3),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.one_of(st.sampled_from(EDGES), st.integers(0, 2**64 - 1)),
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(picks=st.lists(pick, max_size=3), drop=st.lists(st.integers(0, 10**6), max_size=2))
# Found in CI: the SAMPLING chunk's flags set to DUTY_ON_DEVICE with no duty period (info divided by it).
@example(picks=[(258, 0, 0, 18289, 1)], drop=[])
def test_hostile_values_fail_cleanly_in_every_command(tmp_path, picks, drop):
    path = tmp_path / "h.gpuobs"
    path.write_bytes(mutate(every_chunk_bytes(), picks, drop))
    try:
        gpuobs.load(path)
    except RecordingError as exc:
        assert str(path) in str(exc) and "at byte" in str(exc) and " chunk" in str(exc)
    run_every_command(tmp_path, path)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(picks=st.lists(pick, max_size=3), drop=st.lists(st.integers(0, 10**6), max_size=2))
def test_hostile_values_in_block_starts_recordings_fail_cleanly(tmp_path, picks, drop):
    """The same for a block_starts recording: its bounds read slot masks, launch flags,
    streams and quiet points, any of which may be hostile."""
    path = tmp_path / "h.gpuobs"
    path.write_bytes(mutate(block_starts_bytes(), picks, drop))
    run_every_command(tmp_path, path)


def test_the_block_starts_base_passes_every_command(tmp_path):
    path = tmp_path / "b.gpuobs"
    path.write_bytes(block_starts_bytes())
    assert gpuobs.load(path).run.mode_name == "block_starts"
    run_every_command(tmp_path, path, expect_ok=True)
