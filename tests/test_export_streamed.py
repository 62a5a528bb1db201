"""The streamed Perfetto export (recording_file/windows.py + perfetto_export/streamed.py)
writes the in-memory export's trace byte for byte, with every selection, with
segments and SM batches small enough that windows span segments and GPUs span
batches; graph replays that share a grid id resolve as they do with every event at
once; and damage is the error load() gives."""

import io
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import DATA, gpuobs

from gpuobs.errors import CorruptChunk, ExportError
from gpuobs.perfetto_export import export as ex
from gpuobs.perfetto_export import streamed
from gpuobs.recording_file import schema, synthetic
from gpuobs.recording_file import windows as windows_module
from gpuobs.recording_file.reader import load
from gpuobs.recording_file.recording_writer import RecordingWriter
from gpuobs.recording_file.windows import open_windows

SELECTIONS = [
    {},
    {"time_window": "0ms:30ms"},
    {"time_window": "40ms:70ms"},
    {"kernels": "nvjet"},
    {"launches": "1000:1400"},
    {"kernels": "elementwise", "time_window": "0ms:50ms"},
    {"block_args": False},
]


def _both(path, **options):
    """(in-memory trace or error, streamed trace or error)."""
    opts = ex.ExportOptions(**options)
    out = []
    for source in (load(path), open_windows(path)):
        if hasattr(source, "chunks"):
            assert streamed.can_stream(source, opts, ())
        buf = io.BytesIO()
        try:
            ex.export([source], buf, opts)
            out.append(buf.getvalue())
        except ExportError as exc:
            out.append(str(exc))
        finally:
            if hasattr(source, "close"):
                source.close()
    return out


@pytest.mark.parametrize("small", [False, True], ids=["defaults", "small-segments"])
@pytest.mark.parametrize("options", SELECTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "all")
def test_sample_traces_are_the_same(options, small, monkeypatch):
    if small:
        monkeypatch.setattr(windows_module, "SEGMENT_ROWS", 1000)
        monkeypatch.setattr(ex, "BATCH_BLOCKS", 3000)
    whole, streamed_trace = _both(DATA / "decode_block_trace.gpuobs", **options)
    assert isinstance(whole, bytes) and len(whole) > 1000
    assert streamed_trace == whole


def _replays_recording(path, flushes=3, replays=6, blocks=700, dropped=5):
    """Flush windows of graph replays that share one grid id per window (the slow path
    of launch_index_of_events), each window's events in two chunks, some dropped."""
    with RecordingWriter(path) as w:
        w.run(pid=77, mode=schema.Mode.BLOCK_TRACE, capacity=1 << 20, argv=["graph.py"])
        w.device(sm_count=132)
        w.module(module_id=1)
        for slot, (mangled, demangled) in enumerate(synthetic.FUNCTION_NAMES):
            w.function(function_slot=slot, mangled=mangled, demangled=demangled)
        for f in range(flushes):
            ev, launches = synthetic.block_trace_events(replays, blocks, seed=f, gap_ns=20_000)
            offset = f * 10_000_000
            ev["time_start"] += offset
            ev["time_end"] += offset
            ev["grid_id"] = 50 + f
            launches["grid_id"] = 50 + f
            launches["launch_id"] += f * replays
            launches["graph_launch_id"] = np.arange(replays) + 1 + f * replays
            launches["flags"] = schema.LaunchFlag.GRAPH_NODE
            w.launches(launches)
            counts = np.zeros(1, schema.dtype("gpuobs_launch_count"))
            counts["grid_id"], counts["count"], counts["launches_sharing"] = 50 + f, replays * blocks, replays
            ev = ev[np.argsort(ev["time_start"], kind="stable")]  # a segment holds some replays, not all
            ev = ev[: len(ev) - dropped]
            w.flush(flush_seq=f, attempted=len(ev) + dropped, recorded=len(ev), dropped=dropped, launch_counts=counts)
            half = len(ev) // 2
            w.events(ev[:half], flush_seq=f)
            w.events(ev[half:], flush_seq=f)
        w.end(flushes=flushes, launches=flushes * replays, events=0)
    return path


@pytest.mark.parametrize("options", [{}, {"time_window": "10ms:12ms"}, {"launches": "7:13"}, {"kernels": "rms"}])
def test_graph_replays_across_segments_are_the_same(tmp_path, monkeypatch, options):
    path = _replays_recording(tmp_path / "graph.gpuobs")
    monkeypatch.setattr(windows_module, "SEGMENT_ROWS", 500)  # a window spans segments and chunks
    monkeypatch.setattr(ex, "BATCH_BLOCKS", 2000)
    whole, streamed_trace = _both(path, **options)
    assert isinstance(whole, bytes), whole
    assert streamed_trace == whole


def test_windows_not_needed_are_not_read(tmp_path, monkeypatch):
    path = _replays_recording(tmp_path / "graph.gpuobs", flushes=8)
    read = []
    original = windows_module.WindowedRecording.read
    monkeypatch.setattr(
        windows_module.WindowedRecording,
        "read",
        lambda self, c, lo, hi: read.append(c.flush) or original(self, c, lo, hi),
    )
    with open_windows(path) as wr:
        read.clear()
        ex.export([wr], io.BytesIO(), ex.ExportOptions(launches="7:13"))  # the launches of window 1
        assert sorted(set(read)) == [0, 1, 2]
        read.clear()
        ex.export([wr], io.BytesIO(), ex.ExportOptions(time_window="70ms:71ms"))  # in window 7
        # window 7's zones name only its own replays' grid id: windows 5 and 6 hold none of it
        assert sorted(set(read)) == [7]


@pytest.mark.parametrize("window", ["0us:50us", "100us:120us", "300us:", ":20us", "0ms:1ms", "10ms:12ms"])
def test_time_windows_read_by_zones_are_the_same(tmp_path, monkeypatch, window):
    """Zones of 128 events: a window reads the zones its start times may fall in, and
    those that hold the grid ids they name; the trace is the one of every event."""
    monkeypatch.setattr(windows_module, "ZONE_ROWS", 128)
    monkeypatch.setattr(windows_module, "SEGMENT_ROWS", 300)
    read = []
    original = windows_module.WindowedRecording.read
    monkeypatch.setattr(
        windows_module.WindowedRecording,
        "read",
        lambda self, c, lo, hi: read.append(hi - lo) or original(self, c, lo, hi),
    )
    striped = synthetic.write_block_trace_recording(tmp_path / "s.gpuobs", n_launches=120, blocks_per_launch=700)
    for path in (striped, _replays_recording(tmp_path / "graph.gpuobs")):
        read.clear()
        whole, streamed_trace = _both(path, time_window=window)
        assert streamed_trace == whole, (path, window)
        if path == striped and window != "10ms:12ms":
            assert isinstance(whole, bytes)  # it spans 1.8 ms
            if window in ("0us:50us", "100us:120us"):  # a narrow window reads a part of the events
                assert sum(read) < 120 * 700 * 2 // 3


def _damaged(tmp_path, edit):
    path = tmp_path / "bad.gpuobs"
    synthetic.write_block_trace_recording(path, n_launches=4, blocks_per_launch=600, edit_events=edit)
    return path


def test_blocks_open_at_once_is_load_s_error(tmp_path):
    def pile_up(ev):  # 1,100 blocks open at once on SM 3
        ev["sm_id"][:1100] = 3
        ev["time_start"][:1100] = ev["time_start"][0]
        ev["time_end"][:1100] = ev["time_start"][0] + 10_000

    path = _damaged(tmp_path, pile_up)
    with pytest.raises(CorruptChunk) as from_load:
        load(path)
    with open_windows(path) as wr, pytest.raises(CorruptChunk) as from_stream:
        ex.export([wr], io.BytesIO(), ex.ExportOptions())
    assert "blocks are open at once on SM 3" in str(from_load.value)
    assert str(from_stream.value).split(": event")[0] == str(from_load.value).split(": event")[0]


def _same_error_as_load(path, says):
    """open_windows refuses `path` with load()'s own error, which names `says`."""
    with pytest.raises(CorruptChunk) as from_load:
        load(path)
    with pytest.raises(CorruptChunk) as from_windows:
        open_windows(path)
    assert str(from_windows.value) == str(from_load.value) and says in str(from_load.value)


def test_crc_and_values_are_load_s_errors(tmp_path):
    path = _damaged(tmp_path, None)
    data = bytearray(path.read_bytes())
    at = len(data) - 64 * 100  # inside the events, near the end
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    _same_error_as_load(path, "CRC-32")

    def bad_sm(ev):
        ev["sm_id"][17] = 900

    _same_error_as_load(_damaged(tmp_path, bad_sm), "sm_id 900")


def test_cli_streams_and_writes_the_sample_trace(tmp_path):
    out = tmp_path / "t.pftrace"
    r = gpuobs("export", DATA / "decode_block_trace.gpuobs", "-o", out)
    assert r.returncode == 0, r.stderr
    buf = io.BytesIO()
    ex.export([load(DATA / "decode_block_trace.gpuobs")], buf, ex.ExportOptions())
    assert out.read_bytes() == buf.getvalue()


@pytest.mark.parametrize("window", ["50us:70us", "785us:800us", "1215us:1230us", "37500us:37520us", "36ms:37ms"])
def test_time_windows_over_conditional_bodies_are_the_same(monkeypatch, window):
    """The real while-graph recording (tests/data): a window over a body's runs reads
    the kernel its replays are split by (the one before the loop) as well, even
    where none of that kernel's blocks start in the window."""
    monkeypatch.setattr(windows_module, "ZONE_ROWS", 64)
    path = Path(__file__).resolve().parent / "data" / "while_graph_block_trace.gpuobs"
    whole, streamed_trace = _both(path, time_window=window)
    assert streamed_trace == whole, window
    # 36-37 ms: replay 3's last body run ends there (stamped late), yet no launch begins in it
    assert isinstance(whole, bytes) == (window != "36ms:37ms"), whole


def test_a_window_over_a_body_reads_its_replays_anchor_kernels():
    # Zones are read by grid id: a body's grid id alone would leave out the kernels
    # its replays are split by, and the split would fall back to the gaps.
    launches = load(Path(__file__).resolve().parent / "data" / "while_graph_block_trace.gpuobs").launches
    body = (launches["flags"] & schema.LaunchFlag.CONDITIONAL_BODY) != 0
    body_grids = np.unique(launches["grid_id"][body])
    anchors = np.unique(launches["grid_id"][~body])
    read = streamed._with_replay_anchors(launches, body_grids[:1])
    assert set(read.tolist()) == {int(body_grids[0])} | set(anchors.tolist())
    assert streamed._with_replay_anchors(launches, anchors).tolist() == anchors.tolist()  # no body read: as it was
