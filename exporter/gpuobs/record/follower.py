"""While `gpuobs record`'s program runs, a thread follows the recordings it writes
(the output and its child processes' `<stem>.<pid><suffix>`) and works out the facts
of each chunk that grows with the run (record/chunk_facts.py) as it lands. At the
program's exit the summary then reads only what was written since the last look
and the small chunks (record/finish.py): the finish does not grow with the run.

The tool only appends whole chunks, so a chunk whose bytes are all in the file is
final; the one being written is left for the next look. The thread reads with
pread (no mapping a truncation could fault), at a lower CPU priority than the
program's, and fails open: whatever it could not do, the exit reads itself."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import numpy as np

from ..recording_file import schema
from ..recording_file.fileformat import CHUNK_HEADER, FILE_HEADER, MAGIC
from ..recording_file.reader import CHUNK_HEAD
from .chunk_facts import GROWING, FactsCache, FactsError, facts_of

LOOK_EVERY_S = 0.5  # what is left at the exit: the chunks of the last half second, and the exit's own
NICENESS = 10  # the thread yields the CPU to the program (and to the tool's drain in it)
STOP_WAIT_S = 5.0  # a look stops between chunks; one that takes longer is not waited for
LARGEST_CHUNK = 1 << 28  # a growing chunk is one flush's tables: a larger one is left to the exit's read


class Follower:
    def __init__(self, output: Path, every_s: float = LOOK_EVERY_S):
        self.output = Path(output)
        self.every_s = every_s
        self.caches: dict[Path, FactsCache] = {}
        self.stuck: set[Path] = set()  # files with a chunk that does not hold: the exit's read says why
        self.error: str | None = None  # what stopped the thread, if anything did
        self.looks = 0
        self.busy_s = 0.0  # CPU time the looks took (the thread's own)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._settled = False
        self._before: set[tuple] = set()  # files of the output's pattern that were there before the run

    def start(self) -> None:
        """Starts following (after the program is spawned: no fork while it runs). Never
        raises: without a thread (a process or thread limit) the exit reads it all."""
        try:
            self._before = {_identity(p) for p in self._files()} - {None}
            self._thread = threading.Thread(target=self._run, name="gpuobs-follower", daemon=True)
            self._thread.start()
        except Exception as exc:
            self._thread, self.error = None, f"{type(exc).__name__}: {exc}"

    def stop(self) -> None:
        """Stops following; the caches are the exit's to read once the thread has stopped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STOP_WAIT_S)
            self._settled = not self._thread.is_alive()
        else:
            self._settled = True

    def cache_for(self, path: Path) -> FactsCache | None:
        """The facts found of `path`, or None (never followed, or the thread still runs)."""
        return self.caches.get(Path(path)) if self._settled else None

    def _run(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)  # Linux: this thread only
        except (AttributeError, OSError):
            pass
        while not self._stop.wait(self.every_s):
            try:
                self.look()
            except Exception as exc:  # fail open: the exit reads everything itself
                self.error = f"{type(exc).__name__}: {exc}"
                return

    def look(self) -> None:
        """One look at every file of the run: the growing chunks landed since the last."""
        self.looks += 1
        began = time.thread_time()
        try:
            for path in self._files():
                if path not in self.stuck:
                    self._follow(path)
        finally:
            self.busy_s += time.thread_time() - began

    def _files(self) -> list[Path]:
        out = self.output
        children = []
        for p in out.parent.glob(f"{out.stem}.*{out.suffix}"):
            middle = p.name[len(out.stem) + 1 : len(p.name) - len(out.suffix)]
            if middle.isdigit() and middle.isascii():  # as run.child_recordings names them
                children.append(p)
        return [out] + sorted(children)

    def _follow(self, path: Path) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return  # not written yet, or not a file to read
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in self._before:
                return  # (a trimmed copy `<stem>.2<suffix>` left from before is no child of this run)
            cache = self.caches.get(path)
            if cache is None or cache.identity != (st.st_dev, st.st_ino):
                cache = self._new_cache(fd, (st.st_dev, st.st_ino))
                if cache is None:
                    return
                self.caches[path] = cache
            self._read_chunks(path, fd, cache, st.st_size)
        finally:
            os.close(fd)

    @staticmethod
    def _new_cache(fd: int, identity: tuple) -> FactsCache | None:
        """A cache for the file, once its header is whole and a recording's."""
        raw = os.pread(fd, FILE_HEADER.itemsize, 0)
        if len(raw) < FILE_HEADER.itemsize or not raw.startswith(MAGIC.rstrip(b"\0")):
            return None
        header = np.frombuffer(raw, FILE_HEADER, 1)[0]
        if int(header["format_version"]) != schema.FORMAT_VERSION:
            return None
        table_size = schema.launch_table_size(int(header["schema_hash"]))
        return FactsCache(identity=identity, table_size=table_size, until=FILE_HEADER.itemsize)

    def _read_chunks(self, path: Path, fd: int, cache: FactsCache, size: int) -> None:
        at = cache.until
        while at + CHUNK_HEADER.itemsize <= size and not self._stop.is_set():
            head = os.pread(fd, CHUNK_HEADER.itemsize, at)
            if len(head) < CHUNK_HEADER.itemsize:
                break
            ctype, flags, length, crc = CHUNK_HEAD.unpack_from(head)
            end = at + CHUNK_HEADER.itemsize + length
            if end > size:
                break  # the chunk being written: the next look's
            if ctype in GROWING and length > LARGEST_CHUNK:
                self.stuck.add(path)
                break
            if ctype in GROWING:
                payload = os.pread(fd, length, at + CHUNK_HEADER.itemsize)
                if len(payload) < length:
                    break
                try:
                    facts = facts_of(head, payload, at, cache.table_size)
                except FactsError:
                    self.stuck.add(path)
                    break
                cache.chunks[at] = ((ctype, flags, length, crc), facts)
            at = end
        cache.until = at


def _identity(path: Path) -> tuple | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)
