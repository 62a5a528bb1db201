"""`gpuobs export --archive`: the gpuobs trace and the untouched host traces in one
ZIP with a perfetto_manifest that says how they relate. Perfetto v58+ and
ui.perfetto.dev open it as one merged trace.

A PyTorch-profiler JSON is clockless to Perfetto; its times are microseconds from
its own baseTimeNanoseconds on REALTIME. The manifest pins it to the gpuobs
trace's REALTIME (which the measured clock snapshots relate to each GPU's device
clock) with offset_ns = baseTimeNanoseconds (plus the --align shift, if any)."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

from .export import ExportError

TRACE_NAME = "gpuobs.pftrace"


def manifest(host_entries: list, related: bool) -> dict:
    files = [{"path": TRACE_NAME}]
    attributes = {
        "gpuobs.trace": "device tracks on per-GPU device clocks, related to host clocks by measured clock snapshots"
    }
    for i, (name, offset_ns, shift_ns) in enumerate(host_entries):
        files.append(
            {
                "path": name,
                "clocks": {"sync_to": {"file": TRACE_NAME, "clock": "REALTIME"}, "offset_ns": int(offset_ns)},
            }
        )
        attributes[f"gpuobs.host{i}"] = (
            f"{name}: a separate, uninstrumented run, pinned to REALTIME by its "
            f"baseTimeNanoseconds" + (f" and shifted {shift_ns} ns to line up matched kernels" if shift_ns else "")
        )
    doc = {"version": 1, "files": files, "attributes": attributes}
    if related:
        doc["trace_time"] = {"clock": "BOOTTIME", "file": TRACE_NAME}
    return {"perfetto_manifest": doc}


def write_archive(out, trace, hosts: list, summaries: list, related: bool) -> int:
    """Writes the ZIP into `out` (an open binary file: gpuobs.outputs owns it) from the
    gpuobs trace in `trace` (an open binary file at its start). `hosts` and `summaries`
    (ExportSummary.hosts: HostSummary) in the same order. Returns the bytes written."""
    if not related:
        raise ExportError(
            "--archive needs a measured clock relation (the recording has no clock probe samples, "
            "or --clock device): without it the host traces cannot be placed"
        )
    entries, members = [], []
    for host, row in zip(hosts, summaries):
        if host.kind != "pytorch-profiler":
            raise ExportError(
                f"--archive: {host.path} is an {host.kind} export, which Perfetto cannot open; "
                "export without --archive to get its events converted into the trace"
            )
        try:
            data = Path(host.path).read_bytes()  # stored byte for byte
        except OSError as exc:
            raise ExportError(f"--archive: cannot read {host.path}: {exc.strerror}") from None
        base = host.base_ns  # read with the trace: the file is not parsed again
        name = f"host{len(entries)}_{Path(host.path).name}"
        entries.append((name, int(base) + int(row.shift_ns), int(row.shift_ns)))
        members.append((name, data))
    start = out.tell()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("perfetto_manifest.json", json.dumps(manifest(entries, related), indent=2))
        with z.open(TRACE_NAME, "w", force_zip64=True) as member:
            shutil.copyfileobj(trace, member, 1 << 20)
        for name, data in members:
            z.writestr(name, data)  # byte for byte
    return out.tell() - start
