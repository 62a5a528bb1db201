"""A recording the sampler thinned (SAMPLING chunks): every command says what was
left out and by which rule, counts stay whole, launches recorded in part stay out
of the time summary, and `trim` carries the chunks along."""

import json

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

import gpuobs
from gpuobs.analysis import launches as analysis
from gpuobs.analysis.kernel_summary import kernel_times
from gpuobs.metrics.follow import exposition
from gpuobs.recording_file import schema, synthetic
from gpuobs.recording_file.recording_writer import RecordingWriter

from .cli_helpers import gpuobs as run


def test_the_sampling_chunk_is_read_and_added_up(tmp_path):
    rec = gpuobs.load(synthetic.write_sampled_recording(tmp_path / "s.gpuobs"))
    assert len(rec.sampling) == 1 and rec.totals["sampled_out"] == 8 * 1024
    t = rec.totals
    assert t["attempted"] + t["sampled_out"] == analysis.counted_total(rec) == 12 * 1024


def test_info_says_what_was_sampled_out_and_by_which_rule(tmp_path):
    path = synthetic.write_sampled_recording(tmp_path / "s.gpuobs")
    text = run("info", path)
    assert text.returncode == 0
    assert "8,192 blocks counted but not recorded, by a budget of 16 MB/s with bursts of 256 MiB" in text.stdout
    d = json.loads(run("info", path, "--json").stdout)
    assert d["sampling"]["sampled_out"] == 8192 and abs(d["sampling"]["kept_share"] - 1 / 3) < 1e-9


def test_stats_labels_the_sample_and_leaves_partial_launches_out(tmp_path):
    path = synthetic.write_sampled_recording(tmp_path / "s.gpuobs", partial_launch=9)
    times = kernel_times(gpuobs.load(path))
    assert times.launches_partial_left_out and times.launches_partial == 1 and times.launches_without_span == 8
    assert sum(r["instances"] for r in times.rows) == 3  # launches 0, 1 and 2: whole
    lines = run("stats", path).stdout.splitlines()
    assert lines[1].startswith("sampled: ") and lines[1].endswith("counts are exact")
    assert any("1 launches were recorded in part" in line for line in lines)


def test_the_trace_says_it_is_sampled(tmp_path):
    path = synthetic.write_sampled_recording(tmp_path / "s.gpuobs")
    out = tmp_path / "s.pftrace"
    assert run("export", path, "-o", out).returncode == 0
    trace = pb.Trace.FromString(out.read_bytes())
    descriptions = [p.track_descriptor.description for p in trace.packet if p.HasField("track_descriptor")]
    assert any("Sampled: 8,192 blocks" in d for d in descriptions)


def test_trim_keeps_the_sampling_chunks(tmp_path):
    path = synthetic.write_sampled_recording(tmp_path / "s.gpuobs")
    part = tmp_path / "part.gpuobs"
    assert run("trim", path, "-o", part, "--flushes", "0:1").returncode == 0
    assert gpuobs.load(part).totals["sampled_out"] == 8192


def test_metrics_count_what_was_sampled_out(tmp_path):
    text = exposition(synthetic.write_sampled_recording(tmp_path / "s.gpuobs"), top=5)
    assert 'gpuobs_records_sampled_out_total{gpu="0",pid="4242"} 8192.0' in text
    assert 'gpuobs_budget_bytes_per_second{gpu="0",pid="4242"} 1.6e+07' in text


def test_counted_by_flush_takes_a_shared_counter_slot_once(tmp_path):
    """Replays of one graph node in one window share a counter slot (one grid id): each
    launch's row carries the slot's one total, so summing rows counts it once per launch."""
    ev, launches = synthetic.block_trace_events(3, 64, sm_count=8)
    launches["grid_id"] = (7, 7, 9)  # the first two: one node replayed twice in the window
    ev["grid_id"] = np.repeat(launches["grid_id"], 64)
    counts = np.zeros(3, schema.dtype("gpuobs_launch_count"))
    counts["grid_id"], counts["count"], counts["launches_sharing"] = (7, 7, 9), (128, 128, 64), (2, 2, 1)
    path = tmp_path / "shared.gpuobs"
    with RecordingWriter(path) as w:
        w.run(mode=schema.Mode.BLOCK_TRACE)
        w.launches(launches)
        w.flush(attempted=192, recorded=192, dropped=0, launch_counts=counts)
        w.events(ev)
    rec = gpuobs.load(path)
    assert analysis.counted_by_flush(rec) == {(0, 0): 192}
    assert analysis.counted_total(rec) == int(rec.flushes["attempted"][0]) == 192
