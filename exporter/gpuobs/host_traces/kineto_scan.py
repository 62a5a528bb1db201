"""kineto_scan.c, the traceEvents array of a Kineto trace scanned in C into rows,
compiled on first use with the host C compiler and loaded through cffi, as the other
C helpers are. Where it cannot be built (or GPUOBS_PURE_PYTHON=1), or where it meets
anything it does not take (kineto_scan.c says what), kineto.py reads the file in
Python: the same events, the same errors (tests)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from cffi import FFI

from ..errors import GpuobsError
from ..native_cache import compiled_library
from .json_stream import JsonStreamError
from .text_pool import HEADER as TEXT_POOL_HEADER
from .text_pool import pooled_texts

SOURCE = Path(__file__).with_name("kineto_scan.c")
BATCH = 1 << 16  # rows per call
MAX_ELEMENT = 1 << 20  # kineto_scan.c's: a longer element is left to Python
END, FULL, MORE, BAIL = 0, 1, 2, 3
THREAD, STREAM, THREAD_NAME, PROCESS_NAME = 0, 1, 2, 3
IDENT_NONE, IDENT_INT, IDENT_TEXT = 0, 1, 2
ROW = np.dtype(
    [
        ("start_ns", "<i8"),
        ("dur_ns", "<i8"),
        ("index", "<i8"),
        ("owner", "<i8"),
        ("lane", "<i8"),
        ("correlation", "<i8"),
        ("grid", "<i8", (3,)),
        ("block", "<i8", (3,)),
        ("name", "<i4"),
        ("category", "<i4"),
        ("track", "<i4"),
        ("kind", "<i4"),
        ("is_kernel", "<i4"),
        ("pad", "<i4"),
    ]
)
_FFI = FFI()
_FFI.cdef("""
typedef struct scanner scanner;
scanner* kineto_scanner_new(void);
void kineto_scanner_free(scanner* s);
int64_t kineto_string_count(scanner* s);
const char* kineto_string_pool(scanner* s);
const int64_t* kineto_string_offsets(scanner* s);
int64_t kineto_track_count(scanner* s);
const int64_t* kineto_tracks(scanner* s);
int32_t kineto_scan(scanner* s, const uint8_t* buf, int64_t size, int32_t final, int64_t first_index, void* rows,
                    int64_t max_rows, int64_t* n_rows, int64_t* consumed, int64_t* elements);
""")


class ScanStopped(GpuobsError):
    """The C scan met something it leaves to kineto.py's Python reading (caught
    there: never said to a user)."""


@lru_cache(maxsize=1)
def library():
    """The loaded library, or None where it cannot be built or cached here."""
    return compiled_library(_FFI, "kineto-scan", SOURCE, (TEXT_POOL_HEADER,))


class ScannedEvents:
    """What the scan of one file found: its rows (X events, then thread_name and
    process_name metadata, in file order), strings and tracks."""

    def __init__(self, rows: np.ndarray, strings: list, tracks: np.ndarray):
        self.rows, self.strings, self.tracks = rows, strings, tracks

    def text(self, code: int) -> str:
        return self.strings[code]  # code -1 is "" (the last string)

    def key(self, track: int):
        """The track's key as kineto.py makes it: ("thread", pid, tid), ("stream", device, stream)."""
        kind, owner_type, owner, lane_type, lane = self.tracks[track].tolist()
        ident = {IDENT_NONE: lambda v: None, IDENT_INT: lambda v: v, IDENT_TEXT: self.text}
        return (
            ("thread", "stream", "thread_name", "process_name")[kind],
            ident[owner_type](owner),
            ident[lane_type](lane),
        )


class Scan:
    """The traceEvents arrays of one file, each scanned from a json_stream window
    (read_object's `array`); raises ScanStopped where Python must read the file."""

    def __init__(self, lib):
        self.lib = lib
        self.scanner = _FFI.gc(lib.kineto_scanner_new(), lib.kineto_scanner_free)
        if self.scanner == _FFI.NULL:
            raise MemoryError
        self.batches: list = []
        self.out = np.empty(BATCH, ROW)
        self.counts = np.zeros(3, np.int64)  # rows, bytes consumed, elements

    def __call__(self, w) -> int:
        buf = w.hand_over()
        elements = 0
        counts = _FFI.cast("int64_t*", self.counts.ctypes.data)
        while True:
            status = self.lib.kineto_scan(
                self.scanner,
                _FFI.from_buffer(buf),
                len(buf),
                int(w.eof),
                elements,
                _FFI.cast("void*", self.out.ctypes.data),
                BATCH,
                counts,
                counts + 1,
                counts + 2,
            )
            rows, consumed, read = (int(v) for v in self.counts)
            if rows:
                self.batches.append(self.out[:rows].copy())
            elements += read
            if consumed:
                w.passed(buf[:consumed].decode())
                buf = buf[consumed:]
            if status == END:
                w.take_back(buf)
                return elements
            if status == BAIL or (status == MORE and (w.eof or len(buf) > MAX_ELEMENT)):
                raise ScanStopped
            if status == MORE:
                try:
                    data, _text = w.read_bytes()
                except JsonStreamError:
                    raise ScanStopped from None  # Python says where, after what comes before it
                buf += data

    def events(self) -> ScannedEvents:
        rows = np.concatenate(self.batches) if self.batches else np.zeros(0, ROW)
        s, lib = self.scanner, self.lib
        count = int(lib.kineto_string_count(s))
        pooled = pooled_texts(_FFI, count, lib.kineto_string_pool(s), lib.kineto_string_offsets(s))
        strings = [text.decode() for text in pooled]
        strings.append("")
        n = int(lib.kineto_track_count(s))
        tracks = np.frombuffer(_FFI.buffer(lib.kineto_tracks(s), n * 40), np.int64) if n else np.zeros(0, np.int64)
        tracks = tracks.reshape(-1, 5).copy()
        return ScannedEvents(rows, strings, tracks)
