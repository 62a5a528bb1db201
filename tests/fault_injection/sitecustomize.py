"""A disk that fills or a folder that is read-only, for CLI tests on machines where
a tiny tmpfs cannot be mounted. Active only with GPUOBS_TEST_FAULT=FOLDER|ERRNO|BYTES:
files created in FOLDER fail with ERRNO at creation (BYTES empty) or once more than
BYTES were written to them (ENOSPC mid-write). Python imports this module at start
when its folder is on PYTHONPATH."""

import io
import os

_SPEC = os.environ.get("GPUOBS_TEST_FAULT")
if _SPEC:
    _folder, _errno, _after = _SPEC.rsplit("|", 2)
    _folder = os.path.realpath(_folder)
    _errno = int(_errno)
    _limit = int(_after) if _after else None
    _real_open, _real_fdopen = os.open, os.fdopen
    _limited = set()

    def _in_folder(path) -> bool:
        return os.path.realpath(os.path.dirname(os.path.abspath(os.fspath(path)))) == _folder

    def _open(path, flags, mode=0o777, *, dir_fd=None):
        if flags & os.O_CREAT and _in_folder(path):
            if _limit is None:
                raise OSError(_errno, os.strerror(_errno), os.fspath(path))
            fd = _real_open(path, flags, mode, dir_fd=dir_fd)
            _limited.add(fd)
            return fd
        return _real_open(path, flags, mode, dir_fd=dir_fd)

    class _FillingFile(io.RawIOBase):
        def __init__(self, fd):
            self.fd, self.written = fd, 0

        def writable(self):
            return True

        def seekable(self):
            return True

        def write(self, data):
            if self.written + len(data) > _limit:
                raise OSError(_errno, os.strerror(_errno))
            self.written += len(data)
            return os.write(self.fd, data)

        def seek(self, offset, whence=0):
            return os.lseek(self.fd, offset, whence)

        def tell(self):
            return os.lseek(self.fd, 0, os.SEEK_CUR)

        def fileno(self):
            return self.fd

        def close(self):
            if not self.closed:
                _limited.discard(self.fd)
                os.close(self.fd)
            super().close()

    def _fdopen(fd, *args, **kwargs):
        if fd in _limited:
            return io.BufferedWriter(_FillingFile(fd))
        return _real_fdopen(fd, *args, **kwargs)

    os.open, os.fdopen = _open, _fdopen
