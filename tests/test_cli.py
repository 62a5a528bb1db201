"""The gpuobs command line: clear errors, and the commands a user runs."""
import json

import pytest

from typer.testing import CliRunner

import gpuobs
from gpuobs.cli import app

from .trace_decode import decode

runner = CliRunner()


def test_export_reads_the_default_recording_here(tmp_path, block_recording, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpuobs.gpuobs").write_bytes(block_recording.read_bytes())
    (tmp_path / "gpuobs.777.gpuobs").write_bytes(block_recording.read_bytes())  # a child process's file
    (tmp_path / "gpuobs.old.gpuobs").write_bytes(b"not a child: ignored")
    result = runner.invoke(app, ["export", "trace.pftrace"])
    assert result.exit_code == 0, result.output
    assert "24,576 block slices" in result.output and "nothing dropped" in result.output
    assert decode(tmp_path / "trace.pftrace").problems == []


def test_export_errors_name_what_is_wrong(tmp_path, block_recording, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["export", "t.pftrace"])
    assert r.exit_code == 2 and "./gpuobs.gpuobs does not exist" in r.output
    r = runner.invoke(app, ["export", "-i", "missing.gpuobs", "t.pftrace"])
    assert r.exit_code == 2 and "no recording at missing.gpuobs" in r.output
    r = runner.invoke(app, ["export", "-i", str(block_recording), "nope/t.pftrace"])
    assert r.exit_code == 2 and "folder nope does not exist" in r.output
    damaged = tmp_path / "d.gpuobs"
    damaged.write_bytes(block_recording.read_bytes()[:-100])
    r = runner.invoke(app, ["export", "-i", str(damaged), "t.pftrace"])
    assert r.exit_code == 2 and "truncated tail" in r.output and "--salvage" in r.output
    r = runner.invoke(app, ["export", "-i", str(damaged), "--salvage", "t.pftrace"])
    assert r.exit_code == 0 and "damaged at byte" in r.output


def test_info_stats_and_trim(tmp_path, block_recording):
    r = runner.invoke(app, ["info", str(block_recording), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["block_events"] == 12 * 1024
    r = runner.invoke(app, ["stats", str(block_recording), "--json"])
    rows = json.loads(r.output)
    assert sum(row["launches"] for row in rows) == 12 and all(row["blocks_dropped"] == 0 for row in rows)
    assert all(row["block_ns_p50"] > 0 and row["sms"] == 132 for row in rows)
    out = tmp_path / "part.gpuobs"
    r = runner.invoke(app, ["trim", str(block_recording), str(out), "--flushes", "0:1"])
    assert r.exit_code == 0 and len(gpuobs.load(out).events) == 12 * 1024


def test_record_refuses_bad_options_before_running_anything(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["record", "--mode", "warp", "--", "true"])
    assert r.exit_code == 2 and "--mode 'warp' is not one of" in r.output
    r = runner.invoke(app, ["record", "--sample-shift", "40", "--", "true"])
    assert r.exit_code == 2 and "outside 0..32" in r.output
    (tmp_path / "gpuobs.4242.gpuobs").write_bytes(b"x")  # a child's file from an earlier run
    r = runner.invoke(app, ["record", "--", "true"])
    assert r.exit_code == 2 and "gpuobs.4242.gpuobs" in r.output and "pass --force" in r.output
    (tmp_path / "gpuobs.gpuobs").write_bytes(b"x")
    r = runner.invoke(app, ["record", "--", "true"])
    assert r.exit_code == 2 and "gpuobs.gpuobs, gpuobs.4242.gpuobs exist(s)" in r.output
    r = runner.invoke(app, ["record"])
    assert r.exit_code == 2 and "no program to run" in r.output
    r = runner.invoke(app, ["record", "-f", "--window-every", "4", "--no-graph-nodes", "--", "true"])
    assert r.exit_code == 2 and "--window-every needs graph node callbacks" in r.output
    r = runner.invoke(app, ["record", "-f", "--window-every", "-1", "--", "true"])
    assert r.exit_code == 2 and "--window-every -1 is outside" in r.output


def test_windows_without_the_tool_say_how_to_get_it():
    import gpuobs
    from gpuobs.record.runtime import AttachError
    for turn in (gpuobs.pause, gpuobs.resume):
        with pytest.raises(AttachError, match="gpuobs record"):
            turn()


def test_plot_writes_a_heatmap(tmp_path, block_recording):
    import pytest
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.png"
    r = runner.invoke(app, ["plot", str(block_recording), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    from gpuobs.analysis.plot import occupancy
    grid, _t0, width = occupancy(gpuobs.load(block_recording), 0)
    ev = gpuobs.load(block_recording).events
    busy = (ev["time_end"].astype("int64") - ev["time_start"].astype("int64")).sum()
    assert abs(grid.sum() * width - busy) / busy < 1e-6  # every block-nanosecond lands in some bin
