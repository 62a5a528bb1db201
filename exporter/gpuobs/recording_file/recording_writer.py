"""A Python writer for .gpuobs files: the same framing the C++ tool writes.

Tests, fixtures and synthetic benchmarks use it; the reader and this writer
share fileformat.py, so they cannot disagree about framing."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np

from .. import __version__
from . import packed_chunks, schema
from .fileformat import (
    CHUNK_HEADER,
    CRC_COVERED_HEADER_BYTES,
    EVENTS_HEADER,
    events_padding,
    pack_chunk,
    pack_file_header,
)
from .recording import UNFLUSHED

ChunkType = schema.ChunkType


def _one(struct_name: str, **fields) -> np.ndarray:
    row = np.zeros(1, schema.dtype(struct_name))
    for key, value in fields.items():
        row[key] = value
    return row


class RecordingWriter:
    def __init__(self, target, tool_version: str = f"gpuobs-py {__version__}", pack: bool = False):
        """`target`: a path, or an open binary file that stays open (gpuobs.outputs owns it).
        `pack`: LAUNCHES, FLUSH and API_CALLS chunks packed as the tool packs them
        (packed_chunks.py), each where that makes it smaller."""
        self.pack = pack
        self._owned = not hasattr(target, "write")
        self.path = Path(target) if self._owned else None
        self._fh = open(self.path, "wb") if self._owned else target
        self._fh.write(pack_file_header(tool_version))

    # context manager -------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._owned and not self._fh.closed:
            self._fh.close()

    def _chunk(self, chunk_type: int, payload: bytes) -> None:
        if self.pack and chunk_type in packed_chunks.PACKABLE:
            packed = packed_chunks.pack(payload, chunk_type)
            if packed is not None:
                self._fh.write(pack_chunk(chunk_type, packed, flags=packed_chunks.SHUFFLED_ZLIB))
                return
        self._fh.write(pack_chunk(chunk_type, payload))

    # chunks ----------------------------------------------------------------
    def run(
        self,
        *,
        pid=0,
        mode=schema.Mode.BLOCK_TRACE,
        sample_shift=10,
        callback_scope=0,
        capacity=0,  # as the tool writes it by default: as many records as its memory holds
        start_realtime_ns=0,
        start_monotonic_ns=0,
        argv=(),
        window_every=0,
    ):
        argv_bytes = b"".join(a.encode() + b"\0" for a in argv)
        info = _one(
            "gpuobs_run_info",
            pid=pid,
            mode=int(mode),
            sample_shift=sample_shift,
            callback_scope=callback_scope,
            capacity=capacity,
            start_realtime_ns=start_realtime_ns,
            start_monotonic_ns=start_monotonic_ns,
            argv_len=len(argv_bytes),
            window_every=window_every,
        )
        self._chunk(ChunkType.RUN, info.tobytes() + argv_bytes)

    def device(self, *, device_index=0, name="NVIDIA H200", sm_count=132, cc=(9, 0), uuid=bytes(16), context_id=1):
        info = _one(
            "gpuobs_device_info",
            device_index=device_index,
            sm_count=sm_count,
            cc_major=cc[0],
            cc_minor=cc[1],
            context_id=context_id,
            name=name.encode()[:255],
        )
        info["uuid"][0] = np.frombuffer(uuid.ljust(16, b"\0")[:16], np.uint8)
        self._chunk(ChunkType.DEVICE, info.tobytes())

    def function(self, *, function_slot, mangled, demangled="", device_index=0, module_id=1):
        m, d = mangled.encode(), demangled.encode()
        info = _one(
            "gpuobs_function_info",
            function_slot=function_slot,
            device_index=device_index,
            module_id=module_id,
            mangled_len=len(m),
            demangled_len=len(d),
        )
        self._chunk(ChunkType.FUNCTION, info.tobytes() + m + d)

    def module(self, *, module_id, device_index=0, status=1, patch_count=1, cubin_size=0, load_monotonic_ns=0):
        info = _one(
            "gpuobs_module_info",
            module_id=module_id,
            device_index=device_index,
            status=status,
            patch_count=patch_count,
            cubin_size=cubin_size,
            load_monotonic_ns=load_monotonic_ns,
        )
        self._chunk(ChunkType.MODULE, info.tobytes())

    def launches(self, launches: np.ndarray):
        self._chunk(ChunkType.LAUNCHES, np.ascontiguousarray(launches, schema.dtype("gpuobs_launch")).tobytes())

    def clock_samples(self, samples: np.ndarray):
        self._chunk(ChunkType.CLOCK, np.ascontiguousarray(samples, schema.dtype("gpuobs_clock_sample")).tobytes())

    def flush(
        self,
        *,
        device_index=0,
        flush_seq=0,
        attempted,
        recorded,
        dropped,
        host_time_ns=0,
        launch_counts=None,
        filtered=0,
        unattributed=0,
        unmatched_exit_threads=0,
        unconfirmed_ends=0,
        incomplete=0,
        unrecorded_launches=0,
    ):
        counts = (
            np.zeros(0, schema.dtype("gpuobs_launch_count"))
            if launch_counts is None
            else np.ascontiguousarray(launch_counts, schema.dtype("gpuobs_launch_count"))
        )
        info = _one(
            "gpuobs_flush_info",
            device_index=device_index,
            flush_seq=flush_seq,
            attempted=attempted,
            recorded=recorded,
            dropped=dropped,
            host_time_ns=host_time_ns,
            filtered=filtered,
            unattributed=unattributed,
            unmatched_exit_threads=unmatched_exit_threads,
            unconfirmed_ends=unconfirmed_ends,
            launch_count_len=len(counts),
            incomplete=incomplete,
            unrecorded_launches=unrecorded_launches,
        )
        self._chunk(ChunkType.FLUSH, info.tobytes() + counts.tobytes())

    def slots(
        self,
        *,
        device_index=0,
        flush_seq=0,
        warp_arrivals=0,
        warp_arrivals_dropped=0,
        unmatched_arrivals=0,
        device_quiet_ns=0,
    ):
        info = _one(
            "gpuobs_slots_info",
            device_index=device_index,
            flush_seq=flush_seq,
            warp_arrivals=warp_arrivals,
            warp_arrivals_dropped=warp_arrivals_dropped,
            unmatched_arrivals=unmatched_arrivals,
            device_quiet_ns=device_quiet_ns,
        )
        self._chunk(ChunkType.SLOTS, info.tobytes())

    def sampling(self, **fields):
        """A SAMPLING chunk: gpuobs_sampling_info's fields by name (device_index, flush_seq,
        sampled_out, budget_bytes_per_s, burst_bytes, duty_on_ns, duty_period_ns, ...)."""
        self._chunk(ChunkType.SAMPLING, _one("gpuobs_sampling_info", **fields).tobytes())

    def events(self, events: np.ndarray, *, device_index=0, flush_seq=0):
        events = np.ascontiguousarray(events, schema.EVENT_DTYPE)
        padding = events_padding(self._fh.tell())
        head = np.zeros(1, EVENTS_HEADER)
        head["device_index"] = device_index
        head["flush_seq"] = flush_seq
        head["count"] = len(events)
        head["padding"] = padding
        self._chunk(ChunkType.EVENTS, head.tobytes() + bytes(padding) + events.tobytes())

    def events_in_parts(self, parts, count: int, *, device_index=0, flush_seq=0):
        """events() of `count` events too many to hold at once: `parts()` yields them in
        order, and is called twice (the chunk's CRC comes before its payload)."""
        padding = events_padding(self._fh.tell())
        head = np.zeros(1, EVENTS_HEADER)
        head["device_index"] = device_index
        head["flush_seq"] = flush_seq
        head["count"] = count
        head["padding"] = padding
        prefix = head.tobytes() + bytes(padding)
        header = np.zeros(1, CHUNK_HEADER)
        header["type"] = ChunkType.EVENTS
        header["length"] = len(prefix) + count * schema.EVENT_DTYPE.itemsize
        crc = zlib.crc32(prefix, zlib.crc32(header.tobytes()[:CRC_COVERED_HEADER_BYTES]))
        for part in parts():
            crc = zlib.crc32(np.ascontiguousarray(part, schema.EVENT_DTYPE), crc)
        header["crc32"] = crc & 0xFFFFFFFF
        self._fh.write(header.tobytes() + prefix)
        for part in parts():
            self._fh.write(np.ascontiguousarray(part, schema.EVENT_DTYPE).tobytes())

    def api_name(self, api_id: int, name: str):
        n = name.encode()
        self._chunk(ChunkType.API_NAMES, _one("gpuobs_api_name", api_id=api_id, name_len=len(n)).tobytes() + n)

    def api_calls(self, calls: np.ndarray):
        self._chunk(ChunkType.API_CALLS, np.ascontiguousarray(calls, schema.dtype("gpuobs_api_call")).tobytes())

    def notice(self, *, code: int, text: str, device_index=0xFFFFFFFF, monotonic_ns=0):
        t = text.encode()
        info = _one(
            "gpuobs_notice", device_index=device_index, code=int(code), monotonic_ns=monotonic_ns, text_len=len(t)
        )
        self._chunk(ChunkType.NOTICE, info.tobytes() + t)

    def end(self, *, end_monotonic_ns=0, flushes=0, launches=0, events=0):
        info = _one(
            "gpuobs_end_info", end_monotonic_ns=end_monotonic_ns, flushes=flushes, launches=launches, events=events
        )
        self._chunk(ChunkType.END, info.tobytes())

    def close(self):
        self._fh.flush()
        os.fsync(self._fh.fileno())
        if self._owned:
            self._fh.close()


def _rows_by_window(devices: np.ndarray, flush_seqs: np.ndarray) -> dict:
    """{(device, flush_seq): the row indexes in that flush window, in file order}."""
    key = (np.asarray(devices, np.uint64) << np.uint64(32)) | np.asarray(flush_seqs, np.uint64)
    order = np.argsort(key, kind="stable")
    keys, first = np.unique(key[order], return_index=True)
    groups = np.split(order, first[1:])
    return {(int(k) >> 32, int(k) & 0xFFFFFFFF): rows for k, rows in zip(keys, groups)}


class KeptEvents:
    """The events copy_recording keeps, per EVENTS chunk of the recording: of a loaded
    recording, a mask over rec.events. Another source (analysis/streamed_trim.py) gives
    the same figures without holding the events: `devices`, `flushes` (per chunk),
    `left_out(k)` and `write(w, k)`."""

    def __init__(self, rec, keep_event: np.ndarray | None):
        self.chunks = rec.event_chunks
        self.devices, self.flushes = rec.event_chunk_devices, rec.event_chunk_flushes
        self.keep = np.ones(len(rec.events), bool) if keep_event is None else keep_event
        self.starts = np.cumsum([0] + [len(c) for c in rec.event_chunks])

    def _kept(self, k: int) -> np.ndarray:
        return self.keep[self.starts[k] : self.starts[k + 1]]

    def left_out(self, k: int) -> int:
        return int((~self._kept(k)).sum())

    def write(self, w: RecordingWriter, k: int) -> None:
        kept = self._kept(k)
        if kept.any():
            w.events(self.chunks[k][kept], device_index=self.devices[k], flush_seq=self.flushes[k])


def copy_recording(
    rec,
    target,
    keep_flush: np.ndarray | None = None,
    keep_launch: np.ndarray | None = None,
    keep_event: np.ndarray | None = None,
    events=None,
) -> None:
    """Writes `rec` again to a path or an open binary file, keeping the flush windows
    (rows of rec.flushes), launches and events whose mask is True (None keeps all);
    everything that describes the run is kept. A kept window's events that are left
    out count as `filtered`, so its accounting still adds up; a left-out launch's
    count goes with it. For sharing a part of a long recording (`gpuobs trim`).
    `events`: a KeptEvents-like source in place of rec's events and keep_event."""
    all_flushes = keep_flush is None
    keep_flush = np.ones(len(rec.flushes), bool) if keep_flush is None else keep_flush
    keep_launch = np.ones(len(rec.launches), bool) if keep_launch is None else keep_launch
    events = KeptEvents(rec, keep_event) if events is None else events
    # packed as the recording was: a trimmed part of a packed recording stays small
    with RecordingWriter(target, tool_version=rec.tool_version, pack=rec.packed_chunks > 0) as w:
        if rec.run:
            r = rec.run
            w.run(
                pid=r.pid,
                mode=r.mode,
                sample_shift=r.sample_shift,
                callback_scope=r.callback_scope,
                capacity=r.capacity,
                start_realtime_ns=r.start_realtime_ns,
                start_monotonic_ns=r.start_monotonic_ns,
                argv=r.argv,
                window_every=r.window_every,
            )
        for d in rec.devices:
            w._chunk(ChunkType.DEVICE, d.tobytes())
        for m in rec.modules:
            w._chunk(ChunkType.MODULE, m.tobytes())
        for f in rec.functions.values():
            w.function(
                function_slot=f.function_slot,
                mangled=f.mangled,
                demangled=f.demangled,
                device_index=f.device_index,
                module_id=f.module_id,
            )
        if len(rec.clock_samples):
            w.clock_samples(rec.clock_samples)
        # Each table's rows grouped by flush window once: the copy stays linear in the windows.
        lc = rec.launch_counts
        launch_rows = _rows_by_window(rec.launches["device_index"], rec.launch_flushes)
        count_rows = _rows_by_window(lc["device_index"], lc["flush_seq"])
        slots_rows = _rows_by_window(rec.slots["device_index"], rec.slots["flush_seq"])
        sampling_rows = _rows_by_window(rec.sampling["device_index"], rec.sampling["flush_seq"])
        chunk_rows = _rows_by_window(np.asarray(events.devices, np.uint32), np.asarray(events.flushes, np.uint32))
        nothing = np.zeros(0, np.int64)
        for f in rec.flushes[keep_flush]:
            dev, seq = int(f["device_index"]), int(f["flush_seq"])
            in_window = launch_rows.get((dev, seq), nothing)
            launches = rec.launches[in_window[keep_launch[in_window]]]
            if len(launches):
                w.launches(launches)
            mine = count_rows.get((dev, seq), nothing)
            if not keep_launch[in_window].all():  # only the counts of kept launches
                mine = mine[np.isin(lc["grid_id"][mine], launches["grid_id"])]
            counts = lc[mine]
            c = np.zeros(len(counts), schema.dtype("gpuobs_launch_count"))
            for name in ("grid_id", "count", "launches_sharing"):
                c[name] = counts[name]
            chunks = chunk_rows.get((dev, seq), nothing).tolist()
            left_out = sum(events.left_out(k) for k in chunks)
            w.flush(
                device_index=dev,
                flush_seq=seq,
                attempted=int(f["attempted"]),
                recorded=int(f["recorded"]),
                dropped=int(f["dropped"]),
                host_time_ns=int(f["host_time_ns"]),
                launch_counts=c,
                filtered=int(f["filtered"]) + left_out,
                unattributed=int(f["unattributed"]),
                unmatched_exit_threads=int(f["unmatched_exit_threads"]),
                unconfirmed_ends=int(f["unconfirmed_ends"]),
                incomplete=int(f["incomplete"]),
                unrecorded_launches=int(f["unrecorded_launches"]),
            )
            for row in rec.slots[slots_rows.get((dev, seq), nothing)]:  # block_starts: the window's warp slots
                w._chunk(ChunkType.SLOTS, row.tobytes())
            for row in rec.sampling[sampling_rows.get((dev, seq), nothing)]:  # what the sampler left out
                w._chunk(ChunkType.SAMPLING, row.tobytes())
            for k in chunks:
                events.write(w, k)
        orphans = (rec.launch_flushes == UNFLUSHED) & keep_launch  # listed after the last flush
        if all_flushes and orphans.any():
            w.launches(rec.launches[orphans])
        for n in rec.notices:  # what the tool could not record stays said in any part of the run
            code = (
                schema.NoticeCode[n.code.upper()]
                if n.code.upper() in schema.NoticeCode.__members__
                else int(n.code[len("code") :])
            )
            w.notice(code=code, text=n.text, device_index=n.device_index, monotonic_ns=n.monotonic_ns)
        for api_id, name in rec.api_names.items():
            w.api_name(api_id, name)
        calls = rec.api_calls
        if not keep_flush.all() and len(calls):
            # The host-time span of the kept windows: from the end of the flush
            # before the first kept one to the last kept flush.
            f = rec.flushes
            first = int(np.argmax(keep_flush)) if keep_flush.any() else len(f)
            t0 = int(f["host_time_ns"][:first].max()) if first else 0
            t1 = int(f["host_time_ns"][keep_flush].max()) if keep_flush.any() else 0
            calls = calls[(calls["exit_ns"] >= t0) & (calls["enter_ns"] <= t1)]
        if len(calls):
            w.api_calls(calls)
        if rec.end is not None:
            w._chunk(ChunkType.END, rec.end.tobytes())
