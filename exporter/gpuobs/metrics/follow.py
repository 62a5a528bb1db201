"""Live metrics of an always-on recording: `gpuobs metrics REC` follows the file as
the tool appends flush windows to it and serves what it holds so far as Prometheus
metrics (prometheus-client), for the metrics stack a fleet already runs.

Each time the file grows, it is read again up to its last complete chunk (the tail
being written is left for the next look); every metric is then a pure function of
the chunks read, so a scrape shows exactly the recording's counts (`gpuobs stats`'s
numbers) as of its last flush. Reading again is linear in the file: right for
block_counter recordings (no events: a few bytes per launch), the mode meant to
stay on.

Label cardinality is bounded: at most `top` kernels (by launches) are named, each
GPU's rest adds up under kernel="other". A kernel once named stays named, so that
every counter only grows (moving it to "other" would read as a counter reset)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..analysis import launches as analysis
from ..analysis.kernel_names import short_name
from ..errors import GpuobsError, RecordingError
from ..recording_file.reader import load
from ..recording_file.recording import Recording

OTHER = "other"
KERNEL_LABEL_WIDTH = 120  # long template names cut, so that a label stays readable


@dataclass
class Snapshot:
    """What the metrics show: one reading of the file."""

    pid: str
    mode: str
    sample_shift: int
    kernels: dict  # (gpu, kernel label) -> {"launches", "counted", "blocks_recorded", "blocks_dropped", ...}
    gpus: dict  # gpu -> {"flushes", "attempted", "recorded", "dropped", "unrecorded_launches", "ring_fill"}
    bytes_read: int
    complete: bool


@dataclass
class Follower:
    path: Path
    top: int = 20
    named: dict = field(default_factory=dict)  # gpu -> kernel names given their own label, in admission order
    snapshot: Optional[Snapshot] = None
    size: int = -1
    error: Optional[str] = None  # the last read's problem, shown as gpuobs_follow_errors_total
    errors: int = 0
    reads: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def poll(self) -> bool:
        """Reads the file again when it has grown; True when the metrics changed."""
        try:
            size = os.stat(self.path).st_size
        except OSError as exc:
            self._failed(f"{self.path}: {exc.strerror}")
            return False
        if size == self.size:
            return False
        try:
            rec = load(self.path, salvage=True)  # a chunk being written is a truncated tail: left for later
        except RecordingError as exc:
            if size < 4096:  # the header itself may still be on its way
                return False
            self._failed(str(exc))
            return False
        snap = self._snapshot(rec, size)
        with self.lock:
            self.snapshot, self.size, self.error = snap, size, None
            self.reads += 1
        return True

    def _failed(self, message: str) -> None:
        with self.lock:
            self.error = message
            self.errors += 1

    def _snapshot(self, rec: Recording, size: int) -> Snapshot:
        run = rec.run
        counted_blocks = run is None or not run.mode_name.startswith("mem")
        rows = analysis.kernel_stats(rec)
        by_gpu: dict = {}
        for r in rows:
            by_gpu.setdefault(r["device"], []).append(r)
        kernels: dict = {}
        for gpu, members in by_gpu.items():
            named = self.named.setdefault(gpu, [])
            for r in sorted(members, key=lambda r: (-r["launches"], r["kernel"])):
                if r["kernel"] not in named and len(named) < self.top:
                    named.append(r["kernel"])
            for r in members:
                label = short_name(r["kernel"], KERNEL_LABEL_WIDTH) if r["kernel"] in named else OTHER
                row = kernels.setdefault((gpu, label), dict.fromkeys(_KERNEL_VALUES, 0))
                row["launches"] += r["launches"]
                row["blocks_recorded"] += r["blocks_recorded"]
                row["blocks_dropped"] += r["blocks_dropped"]
                row["memory_samples"] += r["memory_events"]
                row["blocks_counted" if counted_blocks else "accesses_counted"] += r["counted"]
        gpus: dict = {}
        capacity = run.capacity if run else 0
        for f in rec.flushes:
            g = gpus.setdefault(int(f["device_index"]), dict.fromkeys(_GPU_VALUES, 0))
            g["flushes"] += 1
            for key in ("attempted", "recorded", "dropped", "unrecorded_launches"):
                g[key] += int(f[key])
            g["ring_fill"] = int(f["attempted"]) / capacity if capacity else 0.0  # the last window's
        for row in rec.sampling:  # the sampler: what the data budget or the duty cycle left out
            g = gpus.setdefault(int(row["device_index"]), dict.fromkeys(_GPU_VALUES, 0))
            g["sampled_out"] += int(row["sampled_out"])
            g["budget_bytes_per_s"] = int(row["budget_bytes_per_s"])  # the last window's rule
        return Snapshot(
            pid=str(run.pid if run else 0),
            mode=run.mode_name if run else "unknown",
            sample_shift=run.sample_shift if run else 0,
            kernels=kernels,
            gpus=gpus,
            bytes_read=size if rec.damage is None else rec.damage.offset,
            complete=rec.complete,
        )


_KERNEL_VALUES = (
    "launches",
    "blocks_counted",
    "accesses_counted",
    "blocks_recorded",
    "blocks_dropped",
    "memory_samples",
)
_GPU_VALUES = (
    "flushes",
    "attempted",
    "recorded",
    "dropped",
    "sampled_out",
    "unrecorded_launches",
    "ring_fill",
    "budget_bytes_per_s",
)
KERNEL_METRICS = {
    "launches": ("gpuobs_kernel_launches", "kernel launches recorded"),
    "blocks_counted": ("gpuobs_kernel_blocks", "thread blocks counted exactly on the device (block modes)"),
    "accesses_counted": ("gpuobs_kernel_accesses", "global memory accesses counted exactly (memory modes)"),
    "blocks_recorded": ("gpuobs_kernel_block_records", "block records kept (block_starts, block_trace)"),
    "blocks_dropped": ("gpuobs_kernel_block_records_dropped", "block records dropped (ring full)"),
    "memory_samples": ("gpuobs_kernel_memory_samples", "memory accesses sampled and kept"),
}
GPU_METRICS = {
    "flushes": ("gpuobs_flushes", "flush windows written"),
    "attempted": ("gpuobs_records_attempted", "records the device tried to write"),
    "recorded": ("gpuobs_records", "records written"),
    "dropped": ("gpuobs_records_dropped", "records dropped because a ring was full"),
    "sampled_out": ("gpuobs_records_sampled_out", "counted but not recorded: the data budget or the duty cycle"),
    "unrecorded_launches": ("gpuobs_unrecorded_launches", "launches outside recording windows"),
}


class RecordingCollector(Collector):
    """prometheus-client collector over a Follower's last snapshot."""

    def __init__(self, follower: Follower):
        self.follower = follower

    def collect(self):
        f = self.follower
        with f.lock:
            snap, errors, reads = f.snapshot, f.errors, f.reads
        up = GaugeMetricFamily("gpuobs_recording_up", "1 once the recording has been read", labels=["path"])
        up.add_metric([str(f.path)], 1.0 if snap else 0.0)
        yield up
        yield CounterMetricFamily("gpuobs_follow_errors", "reads of the recording that failed", value=errors)
        yield CounterMetricFamily("gpuobs_follow_reads", "times the grown recording was read", value=reads)
        if snap is None:
            return
        info = GaugeMetricFamily("gpuobs_recording_info", "the recorded process", labels=["pid", "mode", "complete"])
        info.add_metric([snap.pid, snap.mode, str(snap.complete).lower()], 1.0)
        yield info
        yield GaugeMetricFamily("gpuobs_recording_bytes", "bytes of the recording read", value=snap.bytes_read)
        if snap.mode.startswith("mem"):
            yield GaugeMetricFamily(
                "gpuobs_sample_rate",
                "memory modes: the fraction of accesses sampled (2^-sample_shift)",
                value=2.0**-snap.sample_shift,
            )
        for key, (name, doc) in KERNEL_METRICS.items():
            family = CounterMetricFamily(name, doc, labels=["pid", "gpu", "kernel"])
            for (gpu, kernel), values in sorted(snap.kernels.items()):
                family.add_metric([snap.pid, str(gpu), kernel], values[key])
            yield family
        for key, (name, doc) in GPU_METRICS.items():
            family = CounterMetricFamily(name, doc, labels=["pid", "gpu"])
            for gpu, values in sorted(snap.gpus.items()):
                family.add_metric([snap.pid, str(gpu)], values[key])
            yield family
        fill = GaugeMetricFamily(
            "gpuobs_ring_fill_ratio",
            "the last flush window's records attempted over the ring capacity",
            labels=["pid", "gpu"],
        )
        for gpu, values in sorted(snap.gpus.items()):
            fill.add_metric([snap.pid, str(gpu)], values["ring_fill"])
        yield fill
        budget = GaugeMetricFamily(
            "gpuobs_budget_bytes_per_second", "the data budget the tool keeps to (0: none)", labels=["pid", "gpu"]
        )
        for gpu, values in sorted(snap.gpus.items()):
            budget.add_metric([snap.pid, str(gpu)], values["budget_bytes_per_s"])
        yield budget


def serve(path: Path, port: int, address: str, interval: float, top: int, stop: threading.Event | None = None):
    """Follows `path` every `interval` seconds and serves the metrics on address:port until `stop`."""
    from prometheus_client import CollectorRegistry, start_http_server

    follower = Follower(Path(path), top=top)
    follower.poll()
    registry = CollectorRegistry()
    registry.register(RecordingCollector(follower))
    server, thread = start_http_server(port, addr=address, registry=registry)
    stop = stop or threading.Event()
    try:
        while not stop.wait(interval):
            follower.poll()
    finally:
        server.shutdown()
        thread.join(timeout=5)
    return follower


def exposition(path: Path, top: int) -> str:
    """The metrics of the recording as it is now, in Prometheus's text format (for a textfile collector)."""
    from prometheus_client import CollectorRegistry, generate_latest

    follower = Follower(Path(path), top=top)
    follower.poll()
    if follower.error:
        raise GpuobsError(follower.error)
    registry = CollectorRegistry()
    registry.register(RecordingCollector(follower))
    return generate_latest(registry).decode()


def wait_seconds(text: str) -> float:
    """`--interval 500ms` -> 0.5."""
    from ..ranges import parse_duration

    return parse_duration(text) / 1e9
