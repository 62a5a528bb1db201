"""Opening an input (a recording, a host trace) for reading: it must be a regular
file. Opening a FIFO blocks until a writer comes, reading /dev/zero never ends,
and a folder cannot be read, so anything else is refused before a byte is read."""

from __future__ import annotations

import os
import stat

from .errors import GpuobsError


class NotARegularFile(GpuobsError, OSError):
    pass


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_regular(path):
    """A binary file object for `path`; raises OSError (NotARegularFile for a FIFO,
    device, socket or folder) with a message fit for a user."""
    # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a plain file")
            raise NotARegularFile(f"{kind}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def describe(exc: OSError) -> str:
    """What went wrong opening an input, in words."""
    return str(exc) if isinstance(exc, NotARegularFile) else (exc.strerror or str(exc))
