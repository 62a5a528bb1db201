"""`gpuobs record`'s summary after the run reads the recording's metadata, not its
records: the same numbers as a full load, and a damaged event payload (which a
full load refuses) is not read at all."""

import numpy as np

from gpuobs.analysis.launches import summary
from gpuobs.record.finish import events_by_kind, read_without_events
from gpuobs.recording_file import synthetic
from gpuobs.recording_file.reader import load


def test_the_summary_without_events_matches_a_full_load(tmp_path):
    path = synthetic.write_many_flush_recording(tmp_path / "r.gpuobs", flushes=40, blocks_per_launch=64)
    full = load(path)
    rec, events = read_without_events(path)
    assert events == len(full.events) and len(rec.events) == 0
    a, b = summary(full), summary(rec)
    b["block_events"], b["memory_events"] = events_by_kind(rec, events)
    for key in ("launches", "counted", "attempted", "recorded", "dropped", "block_events", "flushes", "complete"):
        assert a[key] == b[key], key


def test_event_payloads_are_not_read(tmp_path):
    path = synthetic.write_block_trace_recording(tmp_path / "r.gpuobs", n_launches=4, blocks_per_launch=256)
    data = bytearray(path.read_bytes())
    events = load(path).event_chunks[0]
    middle = data.find(events[len(events) // 2].tobytes())
    assert middle > 0
    data[middle + 3] ^= 0xFF  # one event's time: its chunk's CRC fails
    path.write_bytes(bytes(data))
    assert load(path, salvage=True).damage is not None
    rec, count = read_without_events(path)
    assert rec.damage is None and count == 4 * 256 and rec.complete


def test_a_truncated_recording_is_summarised_up_to_its_damage(tmp_path):
    path = synthetic.write_many_flush_recording(tmp_path / "r.gpuobs", flushes=10)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    rec, count = read_without_events(path)
    assert rec.damage is not None and not rec.complete and count > 0
    assert np.all(rec.flushes["flush_seq"] < 10)
