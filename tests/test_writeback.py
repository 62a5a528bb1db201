"""outputs.start_writeback and the export spool's use of it: the output's disk writes are
started as it is spilled, so that the fsync before the rename waits for less."""

import io
import os
import sys

import pytest

from gpuobs import outputs
from gpuobs.perfetto_export.export import _ChunkSpool


@pytest.fixture
def asked(monkeypatch):
    """The sync_file_range calls made, answered as the kernel does when it accepts them."""
    calls = []

    def accept(fd, start, size, flags):
        calls.append((start, size, flags))
        return 0

    monkeypatch.setattr(outputs, "_sync_file_range", accept)
    return calls


def test_start_writeback_asks_for_the_bytes_past_start_once_flushed(tmp_path, asked):
    with open(tmp_path / "t.bin", "wb") as fh:
        fh.write(b"a" * 10)  # still in the BufferedWriter's buffer: flushed first
        assert outputs.start_writeback(fh, 0) == 10
        fh.write(b"b" * 5)
        assert outputs.start_writeback(fh, 10) == 15
        assert outputs.start_writeback(fh, 15) == 15  # nothing new: not asked
    assert asked == [(0, 10, 2), (10, 5, 2)]
    assert (tmp_path / "t.bin").read_bytes() == b"a" * 10 + b"b" * 5


def test_start_writeback_keeps_start_where_it_cannot_ask(tmp_path, asked, monkeypatch):
    assert outputs.start_writeback(io.BytesIO(b"xyz"), 0) == 0  # no file descriptor
    monkeypatch.setattr(outputs, "_sync_file_range", lambda *args: -1)  # the kernel refused (a pipe, EINVAL)
    with open(tmp_path / "t.bin", "wb") as fh:
        fh.write(b"a" * 10)
        assert outputs.start_writeback(fh, 0) == 0
    monkeypatch.setattr(outputs, "_sync_file_range", None)  # not Linux
    with open(tmp_path / "u.bin", "wb") as fh:
        fh.write(b"a" * 10)
        assert outputs.start_writeback(fh, 0) == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_start_writeback_reaches_the_kernel_on_linux(tmp_path):
    assert outputs._sync_file_range is not None
    with open(tmp_path / "t.bin", "wb") as fh:
        fh.write(b"a" * 100_000)
        assert outputs.start_writeback(fh, 0) == 100_000
    assert (tmp_path / "t.bin").read_bytes() == b"a" * 100_000


def _spooled(spool, chunks):
    for chunk in chunks:
        spool.append(chunk)
    return chunks


def test_the_spool_starts_the_output_s_writeback_as_it_spills(tmp_path, asked, monkeypatch):
    monkeypatch.setattr(_ChunkSpool, "SPOOL_BYTES", 10)
    with open(tmp_path / "t.bin", "wb") as fh:
        spool = _ChunkSpool(fh)
        chunks = _spooled(spool, [bytes([i]) * (3 + i % 5) for i in range(40)])
        spool.wait()
        fh.writelines(spool.held)  # what _SpoolingWriter.save writes at the end
    assert (tmp_path / "t.bin").read_bytes() == b"".join(chunks)
    assert len(asked) > 5 and spool.written_back == sum(size for _, size, _ in asked)
    assert [start for start, _, _ in asked] == [0] + [start + size for start, size, _ in asked[:-1]]  # in order
    assert spool.written_back == len(b"".join(chunks)) - sum(map(len, spool.held))


def test_the_spool_s_own_temp_file_is_not_written_back(asked, monkeypatch):
    monkeypatch.setattr(_ChunkSpool, "SPOOL_BYTES", 10)
    spool = _ChunkSpool()
    chunks = _spooled(spool, [bytes([i]) * 7 for i in range(20)])
    assert b"".join(spool) == b"".join(chunks) and spool.owned
    spool.close()
    assert asked == []


@pytest.mark.parametrize("error", [OSError, AttributeError, TypeError])  # no libc, no function, Windows' CDLL(None)
def test_no_sync_file_range_where_libc_has_none(monkeypatch, error):
    def missing(*args, **kwargs):
        raise error("none here")

    monkeypatch.setattr(outputs.ctypes, "CDLL", missing)
    assert outputs._libc_sync_file_range() is None


@pytest.fixture
def advised(monkeypatch):
    """The posix_fadvise calls made: (the file's inode, offset, length, advice)."""
    calls = []

    def advise(fd, offset, length, advice):
        calls.append((os.fstat(fd).st_ino, offset, length, advice))

    monkeypatch.setattr(outputs.os, "posix_fadvise", advise, raising=False)
    return calls


def test_a_forced_write_drops_the_replaced_file_s_cache_and_keeps_its_bytes(tmp_path, advised):
    target = tmp_path / "t.pftrace"
    target.write_bytes(b"old" * 1000)
    inode = os.stat(target).st_ino
    with pytest.raises(outputs.OutputError):
        with outputs.write_atomically(target, force=True) as fh:
            fh.write(b"new")
            raise OSError(28, "No space left on device", str(target))  # a failed write: the old file stays
    assert target.read_bytes() == b"old" * 1000
    assert advised == [(inode, 0, 0, os.POSIX_FADV_DONTNEED)]
    with outputs.write_atomically(target, force=True) as fh:
        fh.write(b"new")
    assert target.read_bytes() == b"new" and len(advised) == 2


def test_no_cache_dropped_without_force_or_a_file(tmp_path, advised):
    with outputs.write_atomically(tmp_path / "new.pftrace") as fh:  # nothing there to replace
        fh.write(b"x")
    with outputs.write_atomically(tmp_path / "other.pftrace", force=True) as fh:
        fh.write(b"x")
    assert advised == []


def test_drop_cached_opens_no_link_and_no_fifo(tmp_path, advised):
    (tmp_path / "real").write_bytes(b"r")
    os.symlink(tmp_path / "real", tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")  # opened without blocking, then left alone
    for name in ("link", "fifo", "missing"):
        outputs.drop_cached(tmp_path / name)
    assert advised == []
    outputs.drop_cached(tmp_path / "real")
    assert len(advised) == 1


def test_drop_cached_without_posix_fadvise(tmp_path, monkeypatch):
    monkeypatch.delattr(outputs.os, "posix_fadvise", raising=False)  # macOS, Windows
    (tmp_path / "f").write_bytes(b"f")
    outputs.drop_cached(tmp_path / "f")
    assert (tmp_path / "f").read_bytes() == b"f"
