"""Write-then-read round trips of every chunk type, and every kind of damage."""

import numpy as np
import pytest

import gpuobs
from gpuobs import errors
from gpuobs.recording_file import schema, synthetic
from gpuobs.recording_file.fileformat import CHUNK_HEADER, FILE_HEADER
from gpuobs.recording_file.recording_writer import RecordingWriter


def _full_recording(path):
    ev, launches = synthetic.block_trace_events(3, 200, sm_count=16)
    clocks = np.zeros(1, schema.dtype("gpuobs_clock_sample"))
    clocks["device_ns"], clocks["realtime_before"], clocks["realtime_after"] = 10_500, 10_000, 11_000
    counts = np.zeros(2, schema.dtype("gpuobs_launch_count"))
    counts["grid_id"], counts["count"] = (1000, 1001), (39_807_744, 6_098)
    with RecordingWriter(path) as w:
        w.run(
            pid=77,
            mode=schema.Mode.MEM_SAMPLED,
            sample_shift=10,
            capacity=4096,
            argv=["a.out", "--x", "ü"],
            window_every=8,
        )
        w.device(device_index=1, name="NVIDIA H200", sm_count=132, cc=(9, 0), uuid=bytes(range(16)))
        w.module(module_id=5, device_index=1, patch_count=1, cubin_size=12345)
        w.function(function_slot=2, mangled="_Z3fooi", demangled="foo(int)", device_index=1, module_id=5)
        w.launches(launches)
        w.clock_samples(clocks)
        w.flush(
            device_index=1,
            flush_seq=3,
            attempted=610,
            recorded=600,
            dropped=10,
            launch_counts=counts,
            unattributed=1,
            unmatched_exit_threads=2,
            unconfirmed_ends=3,
            incomplete=0,
            unrecorded_launches=7,
        )
        w.events(ev, device_index=1, flush_seq=3)
        w.end(flushes=1, launches=3, events=600)
    return ev, launches, clocks, counts


def test_round_trip_of_every_chunk_type(tmp_path):
    path = tmp_path / "r.gpuobs"
    ev, launches, clocks, counts = _full_recording(path)
    rec = gpuobs.load(path)
    assert rec.complete and rec.damage is None
    assert rec.format_version == schema.FORMAT_VERSION and rec.schema_hash == schema.SCHEMA_HASH
    assert rec.tool_version.startswith("gpuobs-py")
    assert rec.run.pid == 77 and rec.run.mode_name == "mem_sampled" and rec.run.argv == ["a.out", "--x", "ü"]
    assert rec.run.capacity == 4096 and rec.run.sample_shift == 10 and rec.run.window_every == 8
    dev = rec.devices[0]
    assert dev["device_index"] == 1 and dev["sm_count"] == 132 and bytes(dev["uuid"]) == bytes(range(16))
    assert rec.device_name(1) == "NVIDIA H200"
    assert rec.modules[0]["module_id"] == 5 and rec.modules[0]["cubin_size"] == 12345
    fn = rec.function(1, 2)
    assert (fn.mangled, fn.demangled, fn.module_id, fn.name) == ("_Z3fooi", "foo(int)", 5, "foo(int)")
    np.testing.assert_array_equal(rec.launches, launches)
    np.testing.assert_array_equal(rec.clock_samples, clocks)
    assert rec.flushes[0]["attempted"] == 610 and rec.flushes[0]["dropped"] == 10
    assert rec.launch_counts["count"].tolist() == [39_807_744, 6_098]
    assert set(rec.launch_counts["flush_seq"]) == {3}
    np.testing.assert_array_equal(rec.events, ev)
    assert rec.event_devices.tolist() == [1] * len(ev)
    assert rec.end["events"] == 600
    assert rec.totals["dropped"] == 10 and rec.totals["events_in_file"] == 600
    assert rec.totals["unrecorded_launches"] == 7


def test_events_are_zero_copy_views_of_the_file(tmp_path):
    path = tmp_path / "r.gpuobs"
    _full_recording(path)
    rec = gpuobs.load(path)
    events = rec.events
    assert not events.flags.owndata and not events.flags.writeable
    assert events.__array_interface__["data"][0] % 64 == 0  # 64-byte aligned in the map


def test_several_event_chunks_concatenate(tmp_path):
    path = tmp_path / "r.gpuobs"
    a, _ = synthetic.block_trace_events(1, 100, seed=1)
    b, _ = synthetic.block_trace_events(1, 50, seed=2)
    with RecordingWriter(path) as w:
        w.events(a, device_index=0)
        w.events(b, device_index=1)
    rec = gpuobs.load(path)
    assert len(rec.event_chunks) == 2 and len(rec.events) == 150
    assert rec.event_devices.tolist() == [0] * 100 + [1] * 50
    assert not rec.complete


def _chunk_offsets(path):
    data = path.read_bytes()
    offsets, off = [], FILE_HEADER.itemsize
    while off < len(data):
        header = np.frombuffer(data, CHUNK_HEADER, 1, off)[0]
        offsets.append((off, int(header["type"]), int(header["length"])))
        off += CHUNK_HEADER.itemsize + int(header["length"])
    return offsets


def _events_chunk(path):
    return next(c for c in _chunk_offsets(path) if c[1] == schema.ChunkType.EVENTS)


def test_flipped_byte_names_file_offset_and_chunk(tmp_path):
    path = tmp_path / "r.gpuobs"
    _full_recording(path)
    off, _, length = _events_chunk(path)
    data = bytearray(path.read_bytes())
    data[off + CHUNK_HEADER.itemsize + length // 2] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(errors.CorruptChunk) as exc:
        gpuobs.load(path)
    msg = str(exc.value)
    assert str(path) in msg and f"at byte {off}" in msg and "EVENTS chunk fails its CRC-32" in msg
    assert exc.value.offset == off


def test_salvage_keeps_every_chunk_before_the_damage(tmp_path):
    path = tmp_path / "r.gpuobs"
    _full_recording(path)
    off, _, length = _events_chunk(path)
    data = bytearray(path.read_bytes())
    data[off + 30] ^= 0xFF
    path.write_bytes(bytes(data))
    rec = gpuobs.load(path, salvage=True)
    assert rec.damage.offset == off and "CRC" in rec.damage.reason
    assert rec.damage.bytes_lost == len(data) - off
    assert len(rec.launches) == 3 and len(rec.flushes) == 1 and rec.run.pid == 77
    assert len(rec.events) == 0 and not rec.complete


def test_truncated_tail_is_an_error_and_salvageable(tmp_path):
    path = tmp_path / "r.gpuobs"
    ev, *_ = _full_recording(path)
    off, _, length = _events_chunk(path)
    data = path.read_bytes()
    path.write_bytes(data[: off + CHUNK_HEADER.itemsize + length - 100])  # died mid-write
    with pytest.raises(errors.TruncatedChunk) as exc:
        gpuobs.load(path)
    assert "truncated tail" in str(exc.value) and f"at byte {off}" in str(exc.value)
    rec = gpuobs.load(path, salvage=True)
    assert rec.damage.offset == off and len(rec.launches) == 3 and len(rec.events) == 0


def test_truncated_chunk_header(tmp_path):
    path = tmp_path / "r.gpuobs"
    _full_recording(path)
    chunks = _chunk_offsets(path)
    last_off = chunks[-1][0]
    path.write_bytes(path.read_bytes()[: last_off + 10])
    with pytest.raises(errors.TruncatedChunk, match="chunk header needs 24 bytes"):
        gpuobs.load(path)
    rec = gpuobs.load(path, salvage=True)
    assert len(rec.events) == 600 and not rec.complete


def test_prefix_ending_on_a_chunk_boundary_loads_as_incomplete(tmp_path):
    path = tmp_path / "r.gpuobs"
    _full_recording(path)
    last_off = _chunk_offsets(path)[-1][0]  # drop the END chunk: the process died after a flush
    path.write_bytes(path.read_bytes()[:last_off])
    rec = gpuobs.load(path)
    assert not rec.complete and rec.damage is None and len(rec.events) == 600


def test_wrong_version(tmp_path):
    path = tmp_path / "r.gpuobs"
    _full_recording(path)
    data = bytearray(path.read_bytes())
    data[8:12] = (99).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(errors.UnsupportedVersion, match=r"at byte 8: format version 99; this gpuobs reads version 1"):
        gpuobs.load(path)


def test_wrong_schema_hash(tmp_path):
    path = tmp_path / "r.gpuobs"
    _full_recording(path)
    data = bytearray(path.read_bytes())
    data[16:24] = (0x1234).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(errors.SchemaMismatch, match="schema hash 0x0000000000001234, expected"):
        gpuobs.load(path)


def test_wrong_magic_and_empty_file(tmp_path):
    path = tmp_path / "x.gpuobs"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(errors.BadMagic, match="not a gpuobs recording"):
        gpuobs.load(path)
    path.write_bytes(b"")
    with pytest.raises(errors.TruncatedChunk, match="file is empty"):
        gpuobs.load(path)
    with pytest.raises(errors.RecordingError, match="cannot open"):
        gpuobs.load(tmp_path / "missing.gpuobs")


def test_damaged_payload_shape_is_a_corrupt_chunk(tmp_path):
    path = tmp_path / "r.gpuobs"
    from gpuobs.recording_file.fileformat import pack_chunk, pack_file_header

    path.write_bytes(pack_file_header("t") + pack_chunk(schema.ChunkType.LAUNCHES, b"x" * 13))
    with pytest.raises(errors.CorruptChunk, match="LAUNCHES chunk: 13 payload bytes are not a whole number"):
        gpuobs.load(path)


def test_copy_recording_keeps_chosen_flush_windows(tmp_path):
    from gpuobs.recording_file.recording_writer import copy_recording

    path = tmp_path / "r.gpuobs"
    _full_recording(path)
    rec = gpuobs.load(path)
    same = tmp_path / "same.gpuobs"
    copy_recording(rec, same)
    again = gpuobs.load(same)
    np.testing.assert_array_equal(again.events, rec.events)
    np.testing.assert_array_equal(again.launches, rec.launches)
    np.testing.assert_array_equal(again.flushes, rec.flushes)
    assert again.functions == rec.functions and again.run == rec.run and again.complete
    none = tmp_path / "none.gpuobs"
    copy_recording(rec, none, rec.flushes["flush_seq"] >= 4)
    assert len(gpuobs.load(none).events) == 0 and len(gpuobs.load(none).launches) == 0


def _slots_recording(path):
    """One block_starts flush window: FLUSH, then its SLOTS chunk, then EVENTS."""
    from gpuobs.recording_file.fileformat import pack_chunk

    ev, launches = synthetic.block_trace_events(1, 4, sm_count=4)
    ev["time_end"], ev["address"] = 0, 0b1011
    with RecordingWriter(path) as w:
        w.run(mode=schema.Mode.BLOCK_STARTS)
        w.launches(launches)
        w.flush(device_index=0, flush_seq=2, attempted=4, recorded=4, dropped=0)
        w.slots(
            device_index=0,
            flush_seq=2,
            warp_arrivals=12,
            warp_arrivals_dropped=3,
            unmatched_arrivals=1,
            device_quiet_ns=1_732_000_000_123_456_789,
        )
        w.events(ev, flush_seq=2)
        w._fh.write(pack_chunk(99, b"a newer writer's chunk"))
    return ev


def test_slots_chunk_round_trip(tmp_path):
    path = tmp_path / "s.gpuobs"
    ev = _slots_recording(path)
    rec = gpuobs.load(path)
    assert rec.run.mode_name == "block_starts" and rec.unknown_chunks == 1
    assert rec.slots.dtype == schema.dtype("gpuobs_slots_info") and len(rec.slots) == 1
    row = rec.slots[0]
    assert (int(row["device_index"]), int(row["flush_seq"])) == (0, 2)
    assert (int(row["warp_arrivals"]), int(row["warp_arrivals_dropped"]), int(row["unmatched_arrivals"])) == (12, 3, 1)
    assert int(row["device_quiet_ns"]) == 1_732_000_000_123_456_789
    assert (rec.totals["warp_arrivals"], rec.totals["warp_arrivals_dropped"], rec.totals["unmatched_arrivals"]) == (
        12,
        3,
        1,
    )
    np.testing.assert_array_equal(rec.events["address"], ev["address"])


def test_copy_recording_keeps_each_windows_slots_chunk(tmp_path):
    from gpuobs.recording_file.recording_writer import copy_recording

    path = tmp_path / "s.gpuobs"
    _slots_recording(path)
    rec = gpuobs.load(path)
    copy_recording(rec, tmp_path / "same.gpuobs")
    np.testing.assert_array_equal(gpuobs.load(tmp_path / "same.gpuobs").slots, rec.slots)
    copy_recording(rec, tmp_path / "none.gpuobs", np.zeros(1, bool))
    assert len(gpuobs.load(tmp_path / "none.gpuobs").slots) == 0


def test_files_of_earlier_layouts_read_without_slots(tmp_path):
    """A file whose header names the layout before block_starts reads as before: no
    SLOTS chunk, an empty slots table, warp-arrival totals 0."""
    earlier = 0xE78BC05CF512A957
    assert earlier in schema.COMPATIBLE_SCHEMAS
    path = tmp_path / "old.gpuobs"
    ev, launches = synthetic.block_trace_events(2, 50, sm_count=8)
    with RecordingWriter(path) as w:
        w.run(mode=schema.Mode.BLOCK_TRACE)
        w.launches(launches)
        w.flush(attempted=100, recorded=100, dropped=0)
        w.events(ev)
    data = bytearray(path.read_bytes())
    data[16:24] = earlier.to_bytes(8, "little")
    path.write_bytes(bytes(data))
    rec = gpuobs.load(path)
    assert rec.schema_hash == earlier and len(rec.events) == 100
    assert len(rec.slots) == 0 and rec.slots.dtype == schema.dtype("gpuobs_slots_info")
    assert rec.totals["warp_arrivals"] == 0


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("warp_arrivals_dropped", 13, "warp_arrivals_dropped 13 is above warp_arrivals 12"),
        ("device_quiet_ns", 1 << 62, "device_quiet_ns .* is not below 2\\^62"),
        ("flush_seq", 0xFFFFFFFF, "flush_seq 0xffffffff is reserved"),
    ],
)
def test_slots_values_no_tool_writes_are_damage(tmp_path, field, value, message):
    path = tmp_path / "bad.gpuobs"
    with RecordingWriter(path) as w:
        w.slots(warp_arrivals=12, **{field: value})
    with pytest.raises(errors.CorruptChunk, match=f"SLOTS chunk: {message}"):
        gpuobs.load(path)
