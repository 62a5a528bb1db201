"""Packed chunks that lie: a raw_length past what deflate can make of the stream, a
stream that inflates past raw_length or stops short of it, a damaged stream, bytes
after it, a header that does not fit. Each is refused in one line naming the file and
the chunk's offset, before anything near the lie is allocated; salvage keeps what came
before; bit flips in a packed recording fail only with the reader's own errors."""

import re
import tracemalloc
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuobs
from gpuobs.errors import CorruptChunk, RecordingError
from gpuobs.recording_file import packed_chunks, schema, synthetic
from gpuobs.recording_file.fileformat import pack_chunk
from gpuobs.recording_file.recording_writer import RecordingWriter

from .cli_helpers import gpuobs as run_gpuobs

ChunkType = schema.ChunkType
HEADER = packed_chunks.PACKED_HEADER
LAUNCHES, _ = synthetic.graph_replay_tables(4, 100)


def _header(raw_length: int, row_size: int = 80, head_size: int = 0) -> bytes:
    h = np.zeros(1, HEADER)
    h["raw_length"], h["row_size"], h["head_size"] = raw_length, row_size, head_size
    return h.tobytes()


def _stream(rows: bytes = LAUNCHES.tobytes()) -> bytes:
    return zlib.compress(packed_chunks.shuffle(rows, 80).tobytes(), 1)


def _recording(path, packed_payload: bytes):
    """A good packed LAUNCHES chunk, then the one under test; returns the latter's offset."""
    with RecordingWriter(path, pack=True) as w:
        w.run(pid=1, argv=["x"])
        w.launches(LAUNCHES)
        offset = w._fh.tell()
        w._fh.write(pack_chunk(ChunkType.LAUNCHES, packed_payload, flags=packed_chunks.SHUFFLED_ZLIB))
    return offset


LIES = {
    "raw_length past deflate's limit": (
        _header(80 << 56) + _stream(),
        r"raw_length 5,764,607,523,034,234,880 is more than deflate's 1032:1 makes of a [\d,]+-byte stream",
    ),
    "inflates past raw_length": (
        _header(len(LAUNCHES.tobytes()) - 80) + _stream(),
        r"its zlib stream inflates past raw_length 31,920",
    ),
    "ends before raw_length": (
        _header(len(LAUNCHES.tobytes()) + 800) + _stream(),
        r"its zlib stream ends after 32,000 of the 32,800 bytes raw_length promises",
    ),
    "stream cut short": (_header(32_000) + _stream()[:-40], r"its zlib stream ends after"),
    "damaged stream": (_header(32_000) + b"\x78\x01" + bytes(range(200, 255)) * 4, r"its zlib stream is damaged"),
    "bytes after the stream": (_header(32_000) + _stream() + b"tail", r"4 bytes follow its zlib stream"),
    "rows of another size": (
        _header(32_000, row_size=64) + _stream(),
        r"packed as 64-byte rows after a 0-byte head; its rows are 80 bytes after a 0-byte head",
    ),
    "not whole rows": (_header(32_001) + _stream(), r"raw_length 32001 is not the 0-byte head and whole 80-byte rows"),
    "header cut short": (_header(32_000)[:10], r"packed payload of 10 bytes is shorter than its 16-byte header"),
}


@pytest.mark.parametrize("case", LIES, ids=list(LIES))
def test_a_lying_packed_chunk_is_refused_in_one_line(tmp_path, case):
    payload, reason = LIES[case]
    path = tmp_path / "r.gpuobs"
    offset = _recording(path, payload)
    with pytest.raises(CorruptChunk) as caught:
        gpuobs.load(path)
    assert caught.value.offset == offset
    assert str(caught.value).startswith(f"{path}: at byte {offset}: LAUNCHES chunk: ")
    assert re.search(reason, str(caught.value)), str(caught.value)
    r = run_gpuobs("info", path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and f"at byte {offset}: LAUNCHES chunk" in r.stderr
    salvaged = gpuobs.load(path, salvage=True)  # the good chunk before it is kept
    assert salvaged.damage.offset == offset and salvaged.launches.tobytes() == LAUNCHES.tobytes()


def _peak_of_refused_load(path, match: str) -> int:
    """Python's peak allocation while gpuobs.load refuses `path` with a CorruptChunk matching `match`."""
    tracemalloc.start()
    try:
        with pytest.raises(CorruptChunk, match=match):
            gpuobs.load(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_huge_raw_length_is_refused_before_it_is_allocated(tmp_path):
    path = tmp_path / "r.gpuobs"
    stream = zlib.compress(bytes(1 << 20), 9)  # 1 MB of zeros: about 1 KB of stream
    _recording(path, _header((1032 * len(stream) // 80 + 1) * 80) + stream)  # whole rows, just past the limit
    peak = _peak_of_refused_load(path, "is more than deflate's 1032:1")
    assert peak < 4 * path.stat().st_size + (16 << 20), peak


def test_a_stream_that_inflates_past_raw_length_is_stopped_there(tmp_path):
    """A bomb (64 MB of zeros in 64 KB) that declares 1 MB: inflating stops a byte past 1 MB."""
    path = tmp_path / "r.gpuobs"
    _recording(path, _header(80 * 13_107) + zlib.compress(bytes(64 << 20), 9))
    peak = _peak_of_refused_load(path, "inflates past raw_length")
    assert peak < 4 * path.stat().st_size + (8 << 20), peak


@pytest.fixture(scope="module")
def packed_original(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "r.gpuobs"
    launches, counts = synthetic.graph_replay_tables(3, 40)
    with RecordingWriter(path, pack=True) as w:
        w.run(pid=1, argv=["x"])
        w.launches(launches)
        w.flush(attempted=0, recorded=0, dropped=0, launch_counts=counts)
    return path.read_bytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 255)), min_size=1, max_size=4))
def test_bit_flips_in_packed_payloads_fail_cleanly(tmp_path, packed_original, flips):
    """Flips in the packed payloads, with each chunk's CRC made to hold again, so that
    the unpacking (not the CRC) has to catch them."""
    buf = bytearray(packed_original)
    offset, chunks = 56, []
    while offset < len(buf):
        length = int.from_bytes(buf[offset + 8 : offset + 16], "little")
        chunks.append((offset, length))
        offset += 24 + length
    packed = [(o, n) for o, n in chunks if int.from_bytes(buf[o + 4 : o + 8], "little")]
    assert len(packed) == 2
    for pos, bits in flips:
        o, n = packed[pos % 2]
        buf[o + 24 + (pos // 2) % n] ^= bits or 1
    for o, n in packed:
        crc = zlib.crc32(bytes(buf[o + 24 : o + 24 + n]), zlib.crc32(bytes(buf[o : o + 16])))
        buf[o + 16 : o + 20] = crc.to_bytes(4, "little")
    path = tmp_path / "d.gpuobs"
    path.write_bytes(bytes(buf))
    try:
        rec = gpuobs.load(path)
        _ = rec.launches, rec.launch_counts, rec.totals
    except RecordingError as exc:
        assert str(path) in str(exc) and "at byte" in str(exc) and "\n" not in str(exc)
    gpuobs.load(path, salvage=True)
