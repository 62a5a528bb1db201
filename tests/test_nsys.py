"""Nsight Systems SQLite exports as --host traces. The fixture is built from the
real PyTorch-profiler run in examples/data by tests/nsys_fixture.py (nsys itself
does not produce reports on the lent GPU machine)."""

import sqlite3
from pathlib import Path

import pytest

import gpuobs
from gpuobs.host_traces.kineto import HostTraceError, load_kineto
from gpuobs.host_traces.nsys import load_host_trace, load_nsys, pid_tid
from gpuobs.perfetto_export.export import export

from .nsys_fixture import build, global_tid
from .trace_decode import decode

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"
PROFILER = DATA / "side_by_side_profiler.json"
API = DATA / "side_by_side_api_trace.gpuobs"


@pytest.fixture(scope="module", params=[False, True], ids=["session-relative", "ts-normalize"])
def nsys_file(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("nsys") / "run.sqlite"
    counts = build(PROFILER, out, ts_normalize=request.param)
    return out, counts


def test_kernels_and_calls_read_back_on_realtime(nsys_file):
    path, counts = nsys_file
    host = load_nsys(path)
    kineto = load_kineto(PROFILER)
    assert host.kind == "nsys" and len(host.kernels) == counts["kernels"] == len(kineto.kernels) > 0
    for a, b in zip(host.kernels, kineto.kernels):
        assert (a.name, a.grid, a.block, a.device, a.stream, a.start_ns, a.dur_ns, a.correlation) == (
            b.name,
            b.grid,
            b.block,
            b.device,
            b.stream,
            b.start_ns,
            b.dur_ns,
            b.correlation,
        )
    runtime = [e for e in host.events if e.category == "cuda_runtime"]
    assert len(runtime) == counts["runtime"] > 0
    kineto_calls = {
        (e.track[1], e.track[2], e.name, e.start_ns)
        for e in kineto.events
        if e.category in ("cuda_runtime", "cuda_driver")
    }
    assert {(e.track[1], e.track[2], e.name, e.start_ns) for e in runtime} == kineto_calls
    nvtx = [e for e in host.events if e.category == "nvtx"]
    assert len(nvtx) == counts["nvtx"] > 0
    assert set(host.thread_names.values()) == {"python3"}


def test_global_tid_holds_pid_and_tid():
    assert pid_tid(global_tid(123456, 654321)) == (123456, 654321)


def test_every_nsys_kernel_matches_the_gpuobs_run(nsys_file, tmp_path):
    path, counts = nsys_file
    rec = gpuobs.load(API)
    out = tmp_path / "t.pftrace"
    summary = export([rec], out, hosts=[load_host_trace(path)])
    h = summary.hosts[0]
    assert h.matched == h.kernels == counts["kernels"]
    d = decode(out)
    assert d.problems == []
    names = {t.name for t in d.tracks.values()}
    assert f"Nsight Systems run: {path.name}" in names
    assert any(n.startswith("NVTX (") for n in names) and {"GPU 0"} <= names
    assert any(n.startswith("stream ") for n in names)
    # pids of the other run label tracks; they never become process or thread tracks
    assert not any(t.HasField("process") or t.HasField("thread") for t in d.tracks.values())


def test_bad_nsys_files_say_what_is_wrong(tmp_path):
    text = tmp_path / "x.sqlite"
    text.write_text("not a database")
    with pytest.raises(HostTraceError, match="not an SQLite file"):
        load_nsys(text)
    empty = tmp_path / "e.sqlite"
    sqlite3.connect(empty).execute("create table Foo (a integer)").connection.commit()
    with pytest.raises(HostTraceError, match="no CUPTI_ACTIVITY_KIND_KERNEL"):
        load_nsys(empty)
    # a JSON file still goes to the Kineto reader
    assert load_host_trace(PROFILER).kind == "pytorch-profiler"
