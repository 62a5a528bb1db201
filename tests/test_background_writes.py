"""BackgroundWrites and the export's spool on it: the same bytes as writing in place, in
order, on another thread, and a failed write raised in the caller with nothing after it."""

from __future__ import annotations

import errno
import io
import threading

import pytest

from gpuobs.background_writes import BackgroundWrites
from gpuobs.perfetto_export.export import _ChunkSpool, _SpoolingWriter


class _Slow(io.BytesIO):
    """A file whose writes record their thread and can be held until released."""

    def __init__(self, fail_at: int | None = None):
        super().__init__()
        self.threads, self.release, self.fail_at = set(), threading.Event(), fail_at
        self.release.set()

    def write(self, data):
        self.threads.add(threading.get_ident())
        assert self.release.wait(10), "held for 10 s: the caller waited on its own write"
        if self.fail_at is not None and self.tell() + len(data) > self.fail_at:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)

    def writelines(self, lines):  # BytesIO's own does not go through write()
        for line in lines:
            self.write(line)


def test_lists_are_written_in_order_on_another_thread():
    fh, after = _Slow(), []
    writes = BackgroundWrites(fh, lambda: after.append((threading.get_ident(), fh.tell())))
    lists = [[bytes([i]) * (i + 1), b"x" * i] for i in range(30)]
    for chunks in lists:
        writes.write(chunks)
    writes.wait()
    assert fh.getvalue() == b"".join(b"".join(c) for c in lists)
    assert threading.get_ident() not in fh.threads
    ends = [t for _, t in after]
    assert ends == sorted(ends) and len(ends) == len(lists) and ends[-1] == len(fh.getvalue())
    assert threading.get_ident() not in {t for t, _ in after}


def test_a_write_runs_beside_the_caller():
    fh = _Slow()
    fh.release.clear()  # the writer waits inside write(); the caller is not held
    writes = BackgroundWrites(fh)
    writes.write([b"abc"])
    assert fh.getvalue() == b""
    fh.release.set()
    writes.wait()
    assert fh.getvalue() == b"abc"


def test_an_error_comes_back_to_the_caller_and_nothing_after_it_is_written():
    fh = _Slow(fail_at=10)
    writes = BackgroundWrites(fh)
    writes.write([b"a" * 8])
    writes.write([b"b" * 8])  # fails: past 10 bytes
    with pytest.raises(OSError) as raised:
        writes.write([b"c" * 8])
    assert raised.value.errno == errno.ENOSPC
    with pytest.raises(OSError):
        writes.wait()  # again, at every later call
    writes.join()  # no raise: what close() uses
    assert fh.getvalue() == b"a" * 8


def test_the_spool_writes_the_same_bytes_and_waits_before_its_file_is_read(monkeypatch, tmp_path):
    monkeypatch.setattr(_ChunkSpool, "SPOOL_BYTES", 10)
    chunks = [bytes([i]) * (1 + i % 7) for i in range(60)]
    for target in (None, "file"):
        fh = open(tmp_path / "t.bin", "w+b") if target else None
        w = _SpoolingWriter(fh)
        for c in chunks:
            w.raw(c)
        if fh is None:
            out = io.BytesIO()
            assert w.save(out) == len(b"".join(chunks)) and out.getvalue() == b"".join(chunks)
        else:
            assert w.save(fh) == len(b"".join(chunks))
            fh.seek(0)
            assert fh.read() == b"".join(chunks)
        w._chunks.close()
        if fh is not None:
            fh.close()


def test_the_spool_raises_a_failed_spill(monkeypatch):
    monkeypatch.setattr(_ChunkSpool, "SPOOL_BYTES", 10)
    fh = _Slow(fail_at=30)
    w = _SpoolingWriter(fh)
    with pytest.raises(OSError) as raised:
        for i in range(40):
            w.raw(bytes([i]) * 6)
        w.save(fh)
    assert raised.value.errno == errno.ENOSPC
    w._chunks.close()
    assert len(fh.getvalue()) <= 30


def test_close_waits_for_a_spill_before_the_file_is_closed(monkeypatch, tmp_path):
    monkeypatch.setattr(_ChunkSpool, "SPOOL_BYTES", 10)
    fh = _Slow()
    fh.release.clear()
    spool = _ChunkSpool(fh)
    for i in range(3):
        spool.append(bytes([i]) * 6)  # the second spills, held in write()
    done = threading.Event()

    def close():
        spool.close()
        done.set()

    closer = threading.Thread(target=close)
    closer.start()
    assert not done.wait(0.2)  # still writing
    fh.release.set()
    closer.join()
    assert fh.getvalue() == bytes([0]) * 6 + bytes([1]) * 6


def test_an_export_that_fails_leaves_no_spill_writing_into_the_caller_s_file(monkeypatch, block_recording):
    """export() into an open file, failing after spills: when the error reaches the caller,
    no writer thread is left writing into the file that is the caller's again."""
    import gpuobs
    from gpuobs.perfetto_export import export as export_module

    monkeypatch.setattr(_ChunkSpool, "SPOOL_BYTES", 10)
    encode_gpu = export_module._export_gpu

    def encode_then_fail(g):
        encode_gpu(g)
        g.w._chunks.wait()
        fh.release.clear()  # the next spill held in write() while the export fails
        threading.Timer(0.3, fh.release.set).start()
        g.w.raw(b"x" * 20)
        raise RuntimeError("a later step failed")

    monkeypatch.setattr(export_module, "_export_gpu", encode_then_fail)
    fh = _Slow()
    with pytest.raises(RuntimeError, match="a later step failed"):
        export_module.export([gpuobs.load(block_recording)], fh)
    assert not [t for t in threading.enumerate() if t.name == "gpuobs-writes" and t.is_alive()]
    written = fh.getvalue()
    fh.seek(0)
    fh.truncate()
    fh.write(b"the caller's own")
    assert written.endswith(b"x" * 20) and fh.getvalue() == b"the caller's own"
