"""Every file gpuobs writes (traces, archives, trimmed recordings, plots) goes
through here, so that no command can destroy a user's file:

* an existing output is replaced only with force (`-f/--force`, as `record` and
  `nsys --force-overwrite`); a symbolic link is never written through or replaced;
* an output that is the same file as an input (same path, a hard link: same
  device and inode) is refused, even with force;
* the data goes to a fresh temp file in the target folder (opened O_EXCL|O_NOFOLLOW,
  a unique name), is fsynced, and only then renamed over the target: a full disk,
  a read-only folder or Ctrl-C leaves the previous file as it was and no partial one.

    with write_atomically(Path("t.pftrace"), inputs=[recording], force=False) as fh:
        fh.write(data)
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import secrets
import signal
import stat
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from .errors import GpuobsError
from .libc import libc_function
from .recording_file import mapping_guard

_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EFBIG: "file too large for this file system",
}
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class OutputError(GpuobsError):
    """An output that may not or could not be written; nothing was written."""


def _reason(exc: OSError) -> str:
    return _REASONS.get(exc.errno, exc.strerror or str(exc))


def _identity(path: Path):
    """(device, inode) of what a path names, following links; None if it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def check_output(path: Path, inputs: Iterable[Path] = (), force: bool = False) -> None:
    """Refuses, before any work is done, an output that write_atomically would refuse."""
    path = Path(path)
    if str(path) == "-":  # a user asking for stdout, not a file named `-`
        raise OutputError("-o - (standard output) is not supported: name a file (./- if you mean one called -)")
    folder = path.parent
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {_reason(exc)}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise OutputError(
                f"{path} is a symbolic link (to {os.readlink(path)}): gpuobs never writes through "
                "or replaces a link; remove it or choose another output"
            )
        if stat.S_ISDIR(st.st_mode):
            raise OutputError(f"cannot write {path}: it is a folder")
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"cannot write {path}: it exists and is not a regular file")
        mine = (st.st_dev, st.st_ino)
        for source in inputs:
            if _identity(Path(source)) == mine:
                same = "is" if Path(source) == path else "is the same file as (a hard link of)"
                raise OutputError(
                    f"{path} {same} the input {source}: gpuobs never writes over what it reads; choose another output"
                )
        if not force:
            raise OutputError(f"{path} exists; pass -f/--force to replace it, or choose another output")
    if not folder.is_dir():
        what = "does not exist" if not os.path.lexists(folder) else "is not a folder"
        raise OutputError(f"cannot write {path}: folder {folder} {what}")
    if not os.access(folder, os.W_OK | os.X_OK):
        probe = OSError(errno.EROFS if _read_only(folder) else errno.EACCES, "")
        raise OutputError(f"cannot write {path}: {_reason(probe)} (folder {folder})")


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _sweep_stale_temps(path: Path) -> None:
    """Removes temp files of `path` left by a gpuobs that was killed outright (SIGKILL,
    a crash): `.NAME.PID.HEX.tmp` whose process is gone."""
    pattern = re.compile(re.escape(f".{path.name}.") + r"(\d+)\.[0-9a-f]{12}\.tmp")
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        m = pattern.fullmatch(name)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # that writer is alive (or the pid was reused): leave it
        except ProcessLookupError:
            pass
        except OSError:
            continue  # alive, another user's
        try:
            os.unlink(path.parent / name)
        except OSError:
            pass


class _Stopped(BaseException):
    """SIGTERM or SIGHUP while an output is written: unwinds so the temp file goes."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _StopHandlers:
    """SIGTERM/SIGHUP raise _Stopped while an output is written, and are remembered:
    an exception raised from a handler can be lost on the way (numpy clears any error
    raised while it probes an operand's attributes, so a signal landing there would
    vanish and the export would finish), so the write checks the record before it
    commits, and the handlers are put back with the signals blocked, so one that
    arrives meanwhile is neither dropped nor run against the old handler."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self):
        self.arrived: list[int] = []
        # True: a signal is only recorded, where raising would strand the temp file or the output is whole.
        self.holding = False
        self.previous: dict = {}
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers
        for sig in self.SIGNALS:
            if signal.getsignal(sig) == signal.SIG_DFL:  # a caller's own handler stays
                self.previous[sig] = signal.signal(sig, self._raise)

    def _raise(self, signum, _frame):
        self.arrived.append(signum)
        if not self.holding:
            raise _Stopped(signum)

    def raise_if_arrived(self) -> None:
        if self.arrived:
            raise _Stopped(self.arrived[0])

    def restore(self) -> int | None:
        """Puts the caller's handlers back; the signal that arrived meanwhile, if any."""
        if not self.previous:
            return None
        sigs = set(self.previous)
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, sigs)  # also runs a handler whose signal just arrived
        except _Stopped:
            pass  # recorded in self.arrived
        for sig, old in self.previous.items():
            signal.signal(sig, old)
        self.previous = {}
        signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
        return self.arrived[0] if self.arrived else None


def _open_temp(path: Path) -> tuple[int, Path]:
    for _ in range(16):
        temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(temp, _TEMP_FLAGS, 0o666), temp
        except FileExistsError:
            continue  # a name someone else holds (or planted): draw another
    raise OutputError(f"cannot write {path}: no unused temp name in {path.parent}")


def _commit(temp: Path, path: Path, force: bool) -> None:
    """Puts the finished temp file at `path`: without force never over a file that
    appeared meanwhile (a hard link fails on an existing name; rename would not)."""
    if force:
        os.replace(temp, path)
        return
    try:
        os.link(temp, path)
    except FileExistsError:
        raise OutputError(f"{path} appeared while gpuobs was writing it; pass -f/--force to replace it") from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if os.path.lexists(path):  # a file system without hard links: check, then rename
            raise OutputError(f"{path} appeared while gpuobs was writing it; pass -f/--force to replace it") from None
        os.rename(temp, path)
        return
    os.unlink(temp)


_SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h: start writeback of the range's dirty pages, do not wait


def _libc_sync_file_range():
    args = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    return libc_function("sync_file_range", args, ctypes.c_int, use_errno=True)  # None: not Linux


_sync_file_range = _libc_sync_file_range()


def start_writeback(fh, start: int) -> int:
    """Asks the kernel to start writing what `fh` holds from offset `start` on to disk now, while the
    caller goes on encoding, so that the fsync before the rename waits only for what came after
    (137 MB of trace: 0.06 s of fsync otherwise). Durability stays the fsync's. Returns the offset
    asked up to; `start` where nothing could be asked (no fileno, not Linux, a pipe)."""
    if _sync_file_range is None:
        return start
    try:
        fh.flush()
        fd = fh.fileno()
        end = fh.tell()
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError and a ValueError
        return start
    if end <= start or _sync_file_range(fd, start, end - start, _SYNC_FILE_RANGE_WRITE) != 0:
        return start
    return end


def drop_cached(path: Path) -> None:
    """Asks the kernel to drop the cached pages of the regular file at `path`, which a
    forced write is about to replace: they are free for the new file's (a big trace is
    not held twice in the page cache while it is rewritten; on the benchmarks' VM, pages
    come back to it far quicker freed than fresh). The file's bytes are untouched, and
    stay until the rename. Nothing where it cannot ask (no posix_fadvise, a link, not a
    regular file, no access)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass  # only a hint
    finally:
        os.close(fd)


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder; the rename itself is atomic
    finally:
        os.close(fd)


@contextmanager
def write_atomically(path: Path, inputs: Iterable[Path] = (), force: bool = False) -> Iterator[BinaryIO]:
    """A binary file to write `path` through; it appears at `path` only when the
    block completes. Raises OutputError (with nothing left behind) on refusal or failure."""
    path = Path(path)
    inputs = list(inputs)
    check_output(path, inputs, force)
    _sweep_stale_temps(path)
    handlers = _StopHandlers()
    stopped = None
    try:
        with _written(path, inputs, force, handlers) as fh:
            yield fh
    except _Stopped as stop:  # the temp file is gone
        stopped = stop.signum
    finally:
        stopped = handlers.restore() or stopped
    if stopped:  # end as the signal would have, with the caller's (default) handler back
        os.kill(os.getpid(), stopped)
        raise SystemExit(128 + stopped)


@contextmanager
def _written(path: Path, inputs: list, force: bool, handlers: _StopHandlers) -> Iterator[BinaryIO]:
    handlers.holding = True  # a stop between the temp file's creation and the try below would leave it
    try:
        fd, temp = _open_temp(path)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {_reason(exc)}") from None
    committed = False
    try:
        handlers.holding = False
        handlers.raise_if_arrived()
        if force:
            drop_cached(path)
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        check_output(path, inputs, force)  # what changed while writing (a link planted, an input moved)
        mapping_guard.check()  # an input cut short while it was read: what was written from it is wrong
        handlers.raise_if_arrived()  # a stop whose exception was lost on the way
        handlers.holding = True  # from here the output is whole: a stop ends the process once it is in place
        _commit(temp, path, force)
        committed = True
        _sync_folder(path.parent)
    except OSError as exc:
        if exc.filename not in (None, str(temp), str(path)):
            raise  # an input that could not be read: the caller's error to report
        raise OutputError(
            f"cannot write {path}: {_reason(exc)}; nothing was written"
            + (" and the existing file is untouched" if os.path.lexists(path) else "")
        ) from None
    finally:
        if not committed:
            try:
                os.unlink(temp)
            except OSError:
                pass
