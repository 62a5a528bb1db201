"""Side by side on real H200 data (examples/data/side_by_side_*): one run of
examples/side_by_side.py under `gpuobs record --api-trace`, one under the PyTorch
profiler. The program runs its workload twice (warm-up, then the measured pass);
the profiler covered the measured pass only."""

import statistics
from pathlib import Path

import numpy as np
import pytest

import gpuobs
from gpuobs.analysis import launches as analysis
from gpuobs.host_traces.kineto import load_kineto
from gpuobs.perfetto_export.api_tracks import flow_id
from gpuobs.perfetto_export.export import ExportOptions, export

from .trace_decode import decode

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"
API = DATA / "side_by_side_api_trace.gpuobs"
PROFILER = DATA / "side_by_side_profiler.json"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("sbs") / "t.pftrace"
    rec = gpuobs.load(API)
    host = load_kineto(PROFILER)
    summary = export([rec], out, hosts=[host])
    return rec, host, summary, decode(out), out


def test_every_launch_call_has_its_flow_to_a_kernel_slice(exported):
    rec, _host, summary, d, _ = exported
    assert d.problems == []
    calls = {int(c["call_id"]): c for c in rec.api_calls}
    launches = rec.launches
    assert (launches["api_call_id"] > 0).all(), "every launch was made inside an API call"
    for launch in launches:
        f = int(flow_id(0, int(launch["launch_id"])))
        assert f in d.flows_out and f in d.flows_in, f"launch {int(launch['launch_id'])} has no flow"
        call_slice, kernel_slice = d.slices[d.flows_out[f]], d.slices[d.flows_in[f]]
        call = calls[int(launch["api_call_id"])]
        assert call_slice[1] == rec.api_names[int(call["api_id"])]
        assert (call_slice[2], call_slice[3]) == (int(call["enter_ns"]), int(call["exit_ns"]))
        assert d.tracks[kernel_slice[0]].name == "Kernels"
        assert kernel_slice[4]["launch"] == int(launch["launch_id"])
    api = summary.api[0]
    assert api.shown and api.flows == len(launches) and api.calls == len(rec.api_calls)
    api_slices = [s for s in d.slices if d.tracks[d.tracks[s[0]].parent_uuid].name.startswith("CUDA API, pid")]
    assert len(api_slices) == len(rec.api_calls)


def test_every_profiler_kernel_is_matched_to_the_measured_pass(exported):
    rec, host, summary, _d, _ = exported
    h = summary.hosts[0]
    assert h.kernels == len(host.kernels) == h.matched > 0
    # The recording holds the warm-up and the measured pass: the profiler's kernels
    # are the measured pass, i.e. the last len(host.kernels) launches in time.
    table = analysis.launch_table(rec)
    timed = np.flatnonzero(table.first_start > 0)
    timed = timed[np.argsort(table.first_start[timed], kind="stable")]
    measured = timed[-len(host.kernels) :]
    theirs = sorted(host.kernels, key=lambda k: k.start_ns)
    for i, k in zip(measured, theirs):
        assert (
            table.name[i],
            tuple(int(v) for v in rec.launches["grid"][i]),
            tuple(int(v) for v in rec.launches["block"][i]),
        ) == (k.name, k.grid, k.block)
    # The per-kernel comparison is the medians of exactly those pairs.
    pairs = {}
    for i, k in zip(measured, theirs):
        pairs.setdefault(table.name[i], []).append((k.dur_ns, int(table.last_end[i]) - int(table.first_start[i])))
    rows = {r["kernel"]: r for r in h.per_kernel}
    assert set(rows) == set(pairs)
    for name, p in pairs.items():
        assert rows[name]["matched"] == len(p)
        assert rows[name]["uninstrumented_us"] == pytest.approx(statistics.median(a for a, _ in p) / 1e3)
        assert rows[name]["instrumented_us"] == pytest.approx(statistics.median(b for _, b in p) / 1e3)


def test_no_flows_and_no_api_tracks_without_a_clock_relation(tmp_path):
    rec = gpuobs.load(API)
    summary = export([rec], tmp_path / "d.pftrace", ExportOptions(clock="device"))
    d = decode(tmp_path / "d.pftrace")
    assert d.problems == [] and not d.flows_out and not d.flows_in
    assert not summary.api[0].shown and "clock" in summary.api[0].why_not


@pytest.mark.browser
def test_side_by_side_in_the_real_ui(exported):
    from .test_perfetto_ui import BAD_STATS, ui_available

    ui_class = ui_available()
    rec, host, _summary, d, out = exported
    with ui_class(out) as ui:
        assert ui.query(BAD_STATS) == []
        names = {r["name"] for r in ui.query("select distinct name from track")}
        assert "Kernels" in names and any(n.startswith("thread ") for n in names)
        assert any(n.startswith("GPU 0") for n in names)
        assert ui.query("select count(*) as n from flow")[0]["n"] == len(rec.launches)
        n_slices = ui.query("select count(*) as n from slice")[0]["n"]
        assert n_slices == len(d.slices)


def test_archive_holds_the_trace_and_the_untouched_profiler_file(tmp_path):
    import json
    import subprocess
    import sys
    import zipfile

    out = tmp_path / "both.zip"
    proc = subprocess.run(
        [sys.executable, "-m", "gpuobs", "export", str(API), "--host", str(PROFILER), "--archive", "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
        assert names == {"perfetto_manifest.json", "gpuobs.pftrace", f"host0_{PROFILER.name}"}
        assert z.read(f"host0_{PROFILER.name}") == PROFILER.read_bytes()
        man = json.loads(z.read("perfetto_manifest.json"))["perfetto_manifest"]
        (tmp_path / "inner.pftrace").write_bytes(z.read("gpuobs.pftrace"))
    base = json.loads(PROFILER.read_text())["baseTimeNanoseconds"]
    assert man["version"] == 1 and man["trace_time"] == {"clock": "BOOTTIME", "file": "gpuobs.pftrace"}
    host_entry = next(f for f in man["files"] if f["path"].startswith("host0_"))
    assert host_entry["clocks"] == {"sync_to": {"file": "gpuobs.pftrace", "clock": "REALTIME"}, "offset_ns": base}
    d = decode(tmp_path / "inner.pftrace")
    assert d.problems == []
    # the profiler's events are not duplicated into the trace; the per-kernel cost still is
    assert not any("PyTorch profiler run" in t.name for t in d.tracks.values())
    kernels = [s for s in d.slices if d.tracks[s[0]].name == "Kernels"]
    assert sum("uninstrumented_ns" in s[4] for s in kernels) == len(load_kineto(PROFILER).kernels)


def test_archive_refuses_what_perfetto_cannot_place(tmp_path):
    import subprocess
    import sys

    def run(*a):
        return subprocess.run([sys.executable, "-m", "gpuobs", "export", str(API), *a], capture_output=True, text=True)

    no_host = run("--archive", "-o", str(tmp_path / "a.zip"))

    def said(p):
        return " ".join(p.stderr.split())  # the console wraps long lines

    assert no_host.returncode != 0 and "pass at least one --host" in said(no_host)
    device = run("--host", str(PROFILER), "--clock", "device", "--archive", "-o", str(tmp_path / "b.zip"))
    assert device.returncode != 0 and "measured clock relation" in said(device)
    assert not (tmp_path / "b.zip").exists() and not list(tmp_path.glob("*.tmp"))


def test_a_host_run_from_before_the_recording_machines_boot_is_called_out(tmp_path):
    """Trace time is BOOTTIME: events of a run older than the machine's uptime would
    be dropped by Perfetto; the summary counts them, and aligning by kernels fixes it."""
    import dataclasses

    rec = gpuobs.load(API)
    host = load_kineto(PROFILER)
    assert export([rec], tmp_path / "now.pftrace", hosts=[host]).hosts[0].before_boot == 0
    boot_ns = int(rec.clock_samples["realtime_before"][0]) - int(rec.clock_samples["boottime_before"][0])
    week = 7 * 86400 * 10**9
    events, kernels = host.events.rows.copy(), host.kernels.rows.copy()
    events["start_ns"] -= week
    kernels["start_ns"] -= week
    old = dataclasses.replace(host, events=host.events.with_rows(events), kernels=host.kernels.with_rows(kernels))
    assert min(e.start_ns for e in old.events) < boot_ns
    h = export([rec], tmp_path / "old.pftrace", hosts=[old]).hosts[0]
    assert h.before_boot == len(old.events) and h.matched == len(old.kernels)
    aligned = export([rec], tmp_path / "aligned.pftrace", ExportOptions(align="kernels"), hosts=[old]).hosts[0]
    assert aligned.before_boot == 0
