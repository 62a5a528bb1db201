"""What a .gpuobs file holds, once read: plain numpy arrays and small records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from . import schema
from .text_tables import ApiNames, Notice, Notices  # noqa: F401  (Notice: read from here too)

UNFLUSHED = schema.NO_FLUSH  # Recording.launch_flushes of a launch listed after its device's last FLUSH


@dataclass
class FunctionInfo:
    device_index: int
    function_slot: int
    module_id: int
    mangled: str
    demangled: str

    @property
    def name(self) -> str:
        return self.demangled or self.mangled or f"function#{self.function_slot}"


@dataclass
class RunInfo:
    pid: int
    mode: int
    sample_shift: int
    callback_scope: int
    capacity: int
    start_realtime_ns: int
    start_monotonic_ns: int
    argv: list[str]
    window_every: int = 0  # automatic windows: 1 interval in this many recorded

    @property
    def mode_name(self) -> str:
        try:
            return schema.Mode(self.mode).name.lower()
        except ValueError:
            return f"mode{self.mode}"


@dataclass
class Damage:
    """Where a salvaged read stopped, and what was lost."""

    offset: int
    reason: str
    bytes_lost: int


def _empty(struct_name: str) -> np.ndarray:
    return np.zeros(0, schema.dtype(struct_name))


def concat(parts: list, dtype: np.dtype) -> np.ndarray:
    """One array of `parts` (each of `dtype`); a single part is returned as it is.
    The bytes are joined as they are: np.concatenate compares padded structured
    dtypes field by field for every part, which takes seconds over thousands."""
    if not parts:
        return np.zeros(0, dtype)
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([np.ascontiguousarray(p).view(np.uint8) for p in parts]).view(dtype)


@dataclass
class Recording:
    path: str
    format_version: int
    schema_hash: int
    tool_version: str
    run: Optional[RunInfo] = None
    devices: np.ndarray = field(default_factory=lambda: _empty("gpuobs_device_info"))
    functions: dict = field(default_factory=dict)  # (device_index, slot) -> FunctionInfo
    modules: np.ndarray = field(default_factory=lambda: _empty("gpuobs_module_info"))
    launches: np.ndarray = field(default_factory=lambda: _empty("gpuobs_launch"))
    clock_samples: np.ndarray = field(default_factory=lambda: _empty("gpuobs_clock_sample"))
    flushes: np.ndarray = field(default_factory=lambda: _empty("gpuobs_flush_info"))
    slots: np.ndarray = field(default_factory=lambda: _empty("gpuobs_slots_info"))  # block_starts: one per flush
    # The sampler's rule and what it left out, one per flush of a mode that records (none before the sampler)
    sampling: np.ndarray = field(default_factory=lambda: _empty("gpuobs_sampling_info"))
    launch_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, LAUNCH_COUNT_ROW))
    event_chunks: list = field(default_factory=list)  # zero-copy views, one per EVENTS chunk
    event_chunk_devices: list = field(default_factory=list)  # device index of each chunk
    event_chunk_flushes: list = field(default_factory=list)  # flush_seq of each chunk
    launch_flushes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32))  # flush_seq of each launch
    api_calls: np.ndarray = field(default_factory=lambda: _empty("gpuobs_api_call"))  # --api-trace
    api_names: ApiNames = field(default_factory=ApiNames)  # api_id -> function name (a read-only mapping)
    notices: Notices = field(default_factory=Notices)  # Notice, in file order (a read-only sequence)
    end: Optional[np.void] = None
    damage: Optional[Damage] = None
    unknown_chunks: int = 0
    packed_chunks: int = 0  # chunks stored packed (GPUOBS_CHUNK_SHUFFLED_ZLIB): trim packs what it writes too
    _events_of: Optional[tuple] = field(default=None, init=False, repr=False, compare=False)

    @property
    def complete(self) -> bool:
        """True when the run closed cleanly (an END chunk was written)."""
        return self.end is not None

    @property
    def events(self) -> np.ndarray:
        """All events: a zero-copy view when the file holds one events chunk, else
        one copy, made at the first use (the reader only appends chunks)."""
        cached = self._events_of
        if cached is None or cached[0] != len(self.event_chunks):
            self._events_of = cached = (len(self.event_chunks), concat(self.event_chunks, schema.EVENT_DTYPE))
        return cached[1]

    def _per_event(self, per_chunk: list) -> np.ndarray:
        """Expands one value per events chunk to one value per event of `events`."""
        counts = [len(c) for c in self.event_chunks]
        return np.repeat(np.asarray(per_chunk, np.uint32), counts) if counts else np.zeros(0, np.uint32)

    @property
    def event_devices(self) -> np.ndarray:
        """The device index of every event in `events`, in the same order."""
        return self._per_event(self.event_chunk_devices)

    @property
    def event_flushes(self) -> np.ndarray:
        """The flush_seq of every event in `events`, in the same order."""
        return self._per_event(self.event_chunk_flushes)

    @property
    def totals(self) -> dict:
        f = self.flushes
        return {
            "attempted": int(f["attempted"].sum()),
            "recorded": int(f["recorded"].sum()),
            "dropped": int(f["dropped"].sum()),
            "filtered": int(f["filtered"].sum()),
            "unattributed": int(f["unattributed"].sum()),
            "unmatched_exit_threads": int(f["unmatched_exit_threads"].sum()),
            "unconfirmed_ends": int(f["unconfirmed_ends"].sum()),
            "incomplete": int(f["incomplete"].sum()),
            "unrecorded_launches": int(f["unrecorded_launches"].sum()),
            "events_in_file": int(sum(len(c) for c in self.event_chunks)),
            # block_starts (SLOTS chunks; 0 in other modes)
            "warp_arrivals": int(self.slots["warp_arrivals"].sum()),
            "warp_arrivals_dropped": int(self.slots["warp_arrivals_dropped"].sum()),
            "unmatched_arrivals": int(self.slots["unmatched_arrivals"].sum()),
            # the sampler (SAMPLING chunks): counted, not recorded, by the data budget or the duty cycle
            "sampled_out": int(self.sampling["sampled_out"].sum()),
        }

    def function(self, device_index: int, slot: int) -> FunctionInfo:
        found = self.functions.get((int(device_index), int(slot)))
        if found is None:
            return FunctionInfo(int(device_index), int(slot), 0, "", f"function#{int(slot)}")
        return found

    def launch_function(self, launch) -> FunctionInfo:
        """The function a row of `launches` ran."""
        return self.function(launch["device_index"], launch["function_slot"])

    def launch_names(self, launches: np.ndarray | None = None) -> list:
        """The name of the function each row of `launches` (all of them by default) ran:
        one lookup per distinct function, so a million launches cost a sort, not a
        million dictionary lookups and records."""
        launches = self.launches if launches is None else launches
        if len(launches) == 0:
            return []
        key = (launches["device_index"].astype(np.uint64) << np.uint64(32)) | launches["function_slot"].astype(
            np.uint64
        )
        distinct = np.unique(key)  # few, as a rule: found by hashing, then each key by bisection
        names = np.array([self.function(k >> 32, k & 0xFFFFFFFF).name for k in distinct.tolist()], object)
        return names[np.searchsorted(distinct, key)].tolist()

    def device_name(self, device_index: int) -> str:
        rows = self.devices[self.devices["device_index"] == device_index]
        if len(rows) == 0:
            return "unknown GPU"
        return rows[0]["name"].decode(errors="replace")


LAUNCH_COUNT_ROW = np.dtype(
    [("device_index", "<u4"), ("flush_seq", "<u4"), ("grid_id", "<u8"), ("count", "<u8"), ("launches_sharing", "<u4")]
)
