"""Packed launch tables (GPUOBS_CHUNK_SHUFFLED_ZLIB): the tool's writer packs LAUNCHES
and FLUSH chunks (tests/native/write_recording.cpp drives tool/recording_file.cpp and
tool/chunk_compress.cpp on the CPU) and every reader reads them as the same recording
written as it is; without libz the tool writes exactly the unpacked file."""

import json
import subprocess
import time
import zlib

import numpy as np
import pytest

import gpuobs
from gpuobs.errors import CorruptChunk
from gpuobs.recording_file import chunk_walk, packed_chunks, schema, synthetic
from gpuobs.recording_file.fileformat import pack_chunk
from gpuobs.recording_file.recording_writer import RecordingWriter, copy_recording
from gpuobs.recording_file.windows import open_windows

from .cli_helpers import SAMPLES
from .cli_helpers import gpuobs as run_gpuobs

ChunkType = schema.ChunkType
TABLES = ("launches", "launch_counts", "flushes", "launch_flushes", "clock_samples", "api_calls", "devices")
REPLAYS, NODES = 40, 565  # 22,600 launches, a flush every 8 replays


def _same_tables(a, b):
    for name in TABLES:
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes(), name
    assert a.events.tobytes() == b.events.tobytes()


written = {}  # per kind: the bytes the tool writer's calls said they added (tool_files)


@pytest.fixture(scope="module")
def tool_files(writer, tmp_path_factory):
    """The same run written by the tool's writer packed, unpacked, and with a libz that
    cannot be loaded (each in a folder of its own, under one name: outputs name it)."""
    root = tmp_path_factory.mktemp("packed")
    files = {}
    kinds = {"packed": ["--pack", "libz.so.1"], "unpacked": [], "no-libz": ["--pack", "libz-gone.so.9"]}
    for kind, pack in kinds.items():
        (root / kind).mkdir()
        out = root / kind / "run.gpuobs"
        proc = subprocess.run(
            [str(writer), "--replays", str(REPLAYS), "--nodes", str(NODES), *pack, str(out)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        files[kind] = (out, proc.stderr)
        written[kind] = int(proc.stdout.split()[-1])
    return files


def test_every_write_says_what_it_added_to_the_file(tool_files):
    # The data budget charges what flushes write besides records by these returns
    # (Drainer::table_bytes), packed or not: they must add up to the file.
    for kind, (path, _) in tool_files.items():
        assert path.stat().st_size == 56 + written[kind], kind  # the 56-byte file header, then the chunks
    assert written["packed"] < written["unpacked"]


def test_the_tool_packs_its_launch_tables_and_they_read_the_same(tool_files):
    packed, said = tool_files["packed"]
    unpacked, _ = tool_files["unpacked"]
    assert said == "packed\n"
    a, b = gpuobs.load(packed), gpuobs.load(unpacked)
    flushes = -(-REPLAYS // 8)
    assert a.packed_chunks == 2 * flushes and b.packed_chunks == 0  # every LAUNCHES and FLUSH chunk
    assert len(a.launches) == REPLAYS * NODES and len(a.flushes) == flushes
    _same_tables(a, b)
    metadata = len(b.launches) * 80 + len(b.launch_counts) * 24
    saved = unpacked.stat().st_size - packed.stat().st_size
    stored = metadata - saved
    print(f"\ntool's writer: {metadata:,} bytes of launch tables stored in {stored:,} ({metadata / stored:.1f}x)")
    assert saved > metadata * 0.8


def test_without_libz_the_tool_writes_the_unpacked_file(tool_files):
    gone, said = tool_files["no-libz"]
    assert said.startswith("unpacked: cannot load libz-gone.so.9")
    assert gone.read_bytes() == tool_files["unpacked"][0].read_bytes()


@pytest.mark.parametrize("args", [["info", "--json"], ["stats", "--json"], ["stats", "-r", "blocks", "--json"]])
def test_reports_of_a_packed_recording_are_those_of_the_unpacked_one(tool_files, args):
    got = []
    for kind in ("packed", "unpacked"):
        r = run_gpuobs(args[0], tool_files[kind][0], *args[1:])
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        assert report.pop("recording", str(tool_files[kind][0])) == str(tool_files[kind][0])
        got.append(report)
    assert got[0] == got[1]


def test_exports_of_a_packed_recording_are_those_of_the_unpacked_one(tool_files, tmp_path):
    traces = []
    for kind in ("packed", "unpacked"):
        out = tmp_path / f"{kind}.pftrace"
        r = run_gpuobs("export", tool_files[kind][0], "-o", out)
        assert r.returncode == 0, r.stderr
        traces.append(out.read_bytes())
    assert traces[0] == traces[1] and len(traces[0]) > 1000


def test_every_reader_unpacks(tool_files, monkeypatch):
    from gpuobs.record.finish import read_without_events

    packed, unpacked = tool_files["packed"][0], tool_files["unpacked"][0]
    with open_windows(packed) as w, open_windows(unpacked) as v:  # the windowed reader
        assert w.rec.packed_chunks > 0
        _same_tables(w.rec, v.rec)
        assert w.event_count == v.event_count == REPLAYS * NODES
    rec, events = read_without_events(packed)  # what `gpuobs record` summarises
    assert events == REPLAYS * NODES and rec.launches.tobytes() == gpuobs.load(unpacked).launches.tobytes()
    monkeypatch.setattr(chunk_walk, "library", lambda: None)  # the Python walk, where chunk_walk.c cannot be built
    _same_tables(gpuobs.load(packed), gpuobs.load(unpacked))


def test_trim_keeps_a_packed_recording_packed(tool_files, tmp_path):
    outs = {}
    for kind in ("packed", "unpacked"):
        outs[kind] = tmp_path / f"{kind}.gpuobs"
        r = run_gpuobs("trim", tool_files[kind][0], "-o", outs[kind], "--flushes", "1:3")
        assert r.returncode == 0, r.stderr
    a, b = gpuobs.load(outs["packed"]), gpuobs.load(outs["unpacked"])
    assert a.packed_chunks == 4 and b.packed_chunks == 0 and len(a.launches) == 16 * NODES
    _same_tables(a, b)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_samples_packed_by_python_read_the_same(sample, tmp_path):
    """The Python writer packs as the tool does; the shipped samples (of an earlier
    schema, never packed) copied packed read as they are."""
    rec = gpuobs.load(sample)
    assert rec.packed_chunks == 0
    rec.packed_chunks = 1  # copy_recording packs what came packed
    copy_recording(rec, tmp_path / "p.gpuobs")
    again = gpuobs.load(tmp_path / "p.gpuobs")
    assert again.packed_chunks > 0
    _same_tables(again, rec)


@pytest.mark.parametrize("chunk_type", sorted(packed_chunks.PACKABLE))
def test_pack_and_unpack_round_trip(chunk_type):
    row_size, head_size = packed_chunks.layout(chunk_type)
    rng = np.random.default_rng(int(chunk_type))
    for rows in (7, 1000):
        payload = bytes(head_size) + (np.arange(rows * row_size) // 5 % 7).astype(np.uint8).tobytes()
        payload = rng.bytes(head_size) + payload[head_size:]
        packed = packed_chunks.pack(payload, chunk_type)
        assert packed is not None and len(packed) < len(payload)
        assert packed_chunks.unpack(packed, chunk_type).tobytes() == payload
        header = np.frombuffer(packed, packed_chunks.PACKED_HEADER, 1)[0]
        assert (int(header["raw_length"]), int(header["row_size"]), int(header["head_size"])) == (
            len(payload),
            row_size,
            head_size,
        )
        assert packed[16 : 16 + head_size] == payload[:head_size]  # the head is stored as it is


def test_shuffle_puts_each_byte_position_together():
    rows = np.arange(12, dtype=np.uint8).reshape(3, 4)  # 3 rows of 4 bytes
    assert packed_chunks.shuffle(rows.tobytes(), 4).tolist() == [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]


def test_what_packing_would_not_shrink_is_stored_as_it_is(tmp_path):
    one = np.random.default_rng(1).bytes(80)  # a launch of noise: a stream and a header cost more
    assert packed_chunks.pack(one, ChunkType.LAUNCHES) is None
    with RecordingWriter(tmp_path / "r.gpuobs", pack=True) as w:
        w._chunk(ChunkType.LAUNCHES, one)
    stored = (tmp_path / "r.gpuobs").read_bytes()[56:]
    assert int.from_bytes(stored[4:8], "little") == 0 and stored[24:] == one  # flags 0, the rows as they are


def _with_chunk(tmp_path, chunk: bytes):
    path = tmp_path / "r.gpuobs"
    with RecordingWriter(path) as w:
        w.run(pid=1, argv=["x"])
        w._fh.write(chunk)
    return path


def test_unknown_flag_bits_are_refused_not_misread(tmp_path):
    launches, _ = synthetic.graph_replay_tables(2, 50)
    path = _with_chunk(tmp_path, pack_chunk(ChunkType.LAUNCHES, launches.tobytes(), flags=2))
    with pytest.raises(CorruptChunk, match=r"LAUNCHES chunk: flags 0x2 hold bits this gpuobs does not know"):
        gpuobs.load(path)


def test_only_table_chunks_may_be_packed(tmp_path):
    path = _with_chunk(tmp_path, pack_chunk(ChunkType.CLOCK, bytes(64 * 4), flags=packed_chunks.SHUFFLED_ZLIB))
    with pytest.raises(CorruptChunk, match=r"CLOCK chunk: packed \(flags 0x1\), which only LAUNCHES, FLUSH"):
        gpuobs.load(path)
    path = _with_chunk(tmp_path, pack_chunk(ChunkType.EVENTS, bytes(16 + 48 + 64), flags=packed_chunks.SHUFFLED_ZLIB))
    for read in (gpuobs.load, open_windows):
        with pytest.raises(CorruptChunk, match=r"EVENTS chunk: packed"):
            read(path)


def test_a_recording_of_the_previous_schema_still_reads():
    assert 0xA8172B000AB71874 in schema.COMPATIBLE_SCHEMAS and schema.SCHEMA_HASH != 0xA8172B000AB71874


def test_size_of_a_serving_shaped_launch_table():
    """100,000 launches of a 565-node graph replayed back to back, a flush every 8
    replays (4,520 launches a chunk): the ratio and speed (printed, not asserted)."""
    launches, counts = synthetic.graph_replay_tables(100_000 // NODES + 1, NODES)
    per_flush = 8 * NODES
    for name, table, ctype in (("launches", launches, ChunkType.LAUNCHES), ("counts", counts, None)):
        raw = stored = 0
        started = time.perf_counter()
        for first in range(0, len(table), per_flush):
            rows = table[first : first + per_flush].tobytes()
            payload = rows if ctype else bytes(packed_chunks.layout(ChunkType.FLUSH)[1]) + rows
            packed = packed_chunks.pack(payload, ctype or ChunkType.FLUSH)
            raw, stored = raw + len(payload), stored + len(packed)
        took = time.perf_counter() - started
        plain = len(zlib.compress(table.tobytes(), 1))
        ratio, alone = raw / stored, table.nbytes / plain
        print(f"\n{name}: {ratio:.1f}x packed ({alone:.1f}x zlib alone), {raw / took / 1e6:.0f} MB/s")
        assert ratio > 2 * alone  # the shuffle is what pays
