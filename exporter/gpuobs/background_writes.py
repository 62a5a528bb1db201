"""Lists of chunks written to a file on a thread of their own, one list at a time and
in order: the kernel's copy of a big trace into the page cache (137 MB of host trace,
0.1 s) runs beside the encoding of what comes next instead of after it. The file is
the writer's alone between write() and wait(); an error writing comes back to the
caller at its next write() or wait(), and nothing after it is written."""

from __future__ import annotations

import threading
from typing import Callable, Optional


class BackgroundWrites:
    def __init__(self, fh, after: Optional[Callable[[], None]] = None):
        self.fh = fh
        self.after = after  # run on the writer's thread after each list is written
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None

    def write(self, chunks: list) -> None:
        """Starts writing `chunks` once the lists before them are written; raises the
        error of an earlier list instead."""
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(chunks,), name="gpuobs-writes")
        self._thread.start()

    def _run(self, chunks: list) -> None:
        try:
            self.fh.writelines(chunks)  # each big chunk's write(2) lets go of the GIL
            if self.after is not None:
                self.after()
        except BaseException as exc:  # noqa: BLE001 (raised again by the caller's thread, in wait)
            self._error = exc

    def join(self) -> None:
        """Every list handed over is written or given up (the file is the caller's again)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def wait(self) -> None:
        """join(), then the first error met raised (again at every later call)."""
        self.join()
        if self._error is not None:
            raise self._error
