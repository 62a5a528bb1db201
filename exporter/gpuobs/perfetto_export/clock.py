"""How a GPU's device clock relates to host clocks, from what was measured.

The tool brackets a %globaltimer read between two readings of each host clock.
Each sample gives the host time at the device reading to within half the bracket.
Device timestamps are never rewritten: snapshots state the measured relation and
Perfetto places the device clock domain next to host traces with it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from . import clock_snapshots

BOOTTIME = pb.BUILTIN_CLOCK_BOOTTIME
MONOTONIC = pb.BUILTIN_CLOCK_MONOTONIC
REALTIME = pb.BUILTIN_CLOCK_REALTIME


def gpu_clock_id(pid: int, device_index: int) -> int:
    """A global custom clock id (>= 128) per GPU of a process: FNV-1a of its name, high bit set."""
    h = 0x811C9DC5
    for byte in f"gpuobs/{pid}/gpu{device_index}".encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h | 0x80000000


@dataclass
class ClockRelation:
    clock_id: int | None  # None: device mode, trace time is the device timeline
    samples: np.ndarray  # gpuobs_clock_sample rows used
    offset_ns: float = 0.0  # device - host MONOTONIC, median over samples
    uncertainty_ns: float = 0.0  # half the widest bracket used
    realtime_offset_ns: float = 0.0  # device - host REALTIME, median over samples

    @property
    def measured(self) -> bool:
        return self.clock_id is not None

    def describe(self) -> str:
        if not self.measured:
            return (
                "Device clock (%globaltimer, ns). No host-clock relation is asserted: trace time here IS "
                "the device timeline, so host traces loaded beside it do not line up."
            )
        return (
            f"Device clock (%globaltimer, ns), its own clock domain. Related to host clocks by "
            f"{len(self.samples)} measured probe(s): a kernel read %globaltimer between two readings of "
            f"CLOCK_MONOTONIC, BOOTTIME and REALTIME; device - host MONOTONIC = {self.offset_ns:,.0f} ns "
            f"+/- {self.uncertainty_ns:,.0f} ns (half the bracket). Device timestamps are not rewritten."
        )

    def snapshot_packets(self, batch: int = 1 << 16):
        """Each sample's ClockSnapshot packet, encoded `batch` samples at a time (bytes
        of Trace.packet entries): bulk-encoded (clock_snapshots.py), because a recording
        may hold a million samples (a protobuf message each took 1.9 GB and 25 s)."""
        for lo in range(0, len(self.samples), batch):
            s = self.samples[lo : lo + batch]
            yield clock_snapshots.snapshot_packets(
                [
                    (self.clock_id, s["device_ns"]),
                    (BOOTTIME, _mid(s, "boottime")),
                    (MONOTONIC, _mid(s, "monotonic")),
                    (REALTIME, _mid(s, "realtime")),
                ]
            )


def _mid(s: np.ndarray, clock: str) -> np.ndarray:
    """The middle of each bracket, rounded down (after >= before: the reader checks it)."""
    before = s[f"{clock}_before"].astype(np.uint64)
    return before + (s[f"{clock}_after"].astype(np.uint64) - before) // np.uint64(2)


def clock_relation(samples: np.ndarray, pid: int, device_index: int, mode: str) -> ClockRelation:
    """mode 'auto': use measured samples if any; 'device': never relate clocks."""
    usable = rows_where(samples, (samples["method"] == 1) & (samples["device_ns"] > 0)) if len(samples) else samples
    if mode == "device" or len(usable) == 0:
        return ClockRelation(None, usable[:0] if len(usable) else usable)
    mono_mid = (usable["monotonic_before"].astype(np.float64) + usable["monotonic_after"]) / 2
    offsets = usable["device_ns"].astype(np.float64) - mono_mid
    half = (usable["monotonic_after"].astype(np.float64) - usable["monotonic_before"]) / 2
    device_ns = usable["device_ns"]
    in_order = len(device_ns) < 2 or bool((device_ns[1:] > device_ns[:-1]).all())  # as the tool writes them
    real_mid = (usable["realtime_before"].astype(np.float64) + usable["realtime_after"]) / 2
    real_offsets = usable["device_ns"].astype(np.float64) - real_mid
    return ClockRelation(
        gpu_clock_id(pid, device_index),
        usable if in_order else usable[np.argsort(device_ns)],  # (strictly increasing: argsort's order)
        float(np.median(offsets)),
        float(half.max()),
        float(np.median(real_offsets)),
    )


def rows_where(rows: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """rows[keep], without copying every row when every row is kept (a million clock
    samples are 88 MB)."""
    return rows if keep.all() else rows[keep]
