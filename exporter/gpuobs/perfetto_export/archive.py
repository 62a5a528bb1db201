"""`gpuobs export --archive`: the gpuobs trace and the untouched host traces in one
ZIP with a perfetto_manifest that says how they relate. Perfetto v58+ and
ui.perfetto.dev open it as one merged trace.

A PyTorch-profiler JSON is clockless to Perfetto; its times are microseconds from
its own baseTimeNanoseconds on REALTIME. The manifest pins it to the gpuobs
trace's REALTIME (which the measured clock snapshots relate to each GPU's device
clock) with offset_ns = baseTimeNanoseconds (plus the --align shift, if any)."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

from .export import ExportError

TRACE_NAME = "gpuobs.pftrace"


def manifest(host_entries: list, related: bool) -> dict:
    files = [{"path": TRACE_NAME}]
    attributes = {"gpuobs.trace": "device tracks on per-GPU device clocks, related to host clocks by measured "
                                  "clock snapshots"}
    for i, (name, offset_ns, shift_ns) in enumerate(host_entries):
        files.append({"path": name, "clocks": {"sync_to": {"file": TRACE_NAME, "clock": "REALTIME"},
                                               "offset_ns": int(offset_ns)}})
        attributes[f"gpuobs.host{i}"] = (f"{name}: a separate, uninstrumented run, pinned to REALTIME by its "
                                         f"baseTimeNanoseconds" +
                                         (f" and shifted {shift_ns} ns to line up matched kernels" if shift_ns
                                          else ""))
    doc = {"version": 1, "files": files, "attributes": attributes}
    if related:
        doc["trace_time"] = {"clock": "BOOTTIME", "file": TRACE_NAME}
    return {"perfetto_manifest": doc}


def write_archive(out_path, trace_path, hosts: list, summaries: list, related: bool) -> int:
    """`hosts` and `summaries` (ExportSummary.hosts: HostSummary) in the same order."""
    if not related:
        raise ExportError("--archive needs a measured clock relation (the recording has no clock probe samples, "
                          "or --clock device): without it the host traces cannot be placed")
    entries, members = [], []
    for host, row in zip(hosts, summaries):
        if host.kind != "pytorch-profiler":
            raise ExportError(f"--archive: {host.path} is an {host.kind} export, which Perfetto cannot open; "
                              "export without --archive to get its events converted into the trace")
        base = host.base_ns  # read with the trace: the file is not parsed again
        name = f"host{len(entries)}_{Path(host.path).name}"
        entries.append((name, int(base) + int(row.shift_ns), int(row.shift_ns)))
        members.append((name, Path(host.path)))
    try:
        with zipfile.ZipFile(out_path, "w", compression=zipfile.ZIP_DEFLATED) as z:
            z.writestr("perfetto_manifest.json", json.dumps(manifest(entries, related), indent=2))
            z.write(trace_path, TRACE_NAME)
            for name, path in members:
                z.write(path, name)  # byte for byte
    except OSError as exc:
        raise ExportError(f"cannot write {out_path}: {exc.strerror}") from None
    return Path(out_path).stat().st_size
