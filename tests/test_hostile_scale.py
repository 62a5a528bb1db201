"""Analysis grows with the recording, not faster: `info`'s flush windows, `stats`'s
per-kernel figures and kernel-name shortening are one grouped pass. Each check
times the work at n and 4n (best of three) and allows 8x, where linear work takes
about 4x and the per-window, per-kernel and per-fold rescans they replace took 16x
or more; benchmarks/analysis_scale.py measures the 1M-event targets."""

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from gpuobs.analysis import kernel_summary, launches, recording_info  # noqa: E402
from gpuobs.analysis.kernel_names import short_name  # noqa: E402
from gpuobs.recording_file import synthetic  # noqa: E402
from gpuobs.recording_file.reader import load  # noqa: E402

ALLOWED = 8.0


def _best_of_three(work) -> float:
    took = []
    for _ in range(3):
        began = time.perf_counter()
        work()
        took.append(time.perf_counter() - began)
    return min(took)


def _grows_linearly(make, work, n):
    small, big = make(n), make(4 * n)
    ratio = _best_of_three(lambda: work(big)) / max(_best_of_three(lambda: work(small)), 1e-4)
    assert ratio < ALLOWED, f"4x the input took {ratio:.1f}x the time"


def test_flush_windows_are_one_pass(tmp_path):
    def make(n):
        return load(synthetic.write_many_flush_recording(tmp_path / f"w{n}.gpuobs", n))

    rec = make(50)
    rows = recording_info.flush_windows(rec)  # what the old per-window scan gave
    for row, f in zip(rows, rec.flushes):
        mine = (rec.event_flushes == f["flush_seq"]) & (rec.event_devices == f["device_index"])
        assert row["events"] == int(mine.sum())
        assert row["launches"] == int((rec.launch_flushes == f["flush_seq"]).sum())
    _grows_linearly(make, recording_info.flush_windows, 3000)


def test_kernel_figures_are_one_pass(tmp_path):
    from analysis_scale import write_many_kernels

    def make(n, blocks=200):  # enough events per kernel that a scan per kernel shows
        return load(write_many_kernels(tmp_path / f"k{n}.gpuobs", n, blocks_per_launch=blocks))

    rec = make(40, blocks=4)
    rows = launches.kernel_stats(rec)
    assert len(rows) == 40 and all(r["blocks_recorded"] == 4 and r["sms"] == 4 for r in rows)
    ev = rec.events
    for r in rows:
        mine = ev[ev["function_slot"] == int(r["kernel"].split("_")[1].split("<")[0])]
        dur = mine["time_end"].astype(np.int64) - mine["time_start"].astype(np.int64)
        assert r["block_ns_p50"] == int(np.percentile(dur, 50)) and r["block_ns_p99"] == int(np.percentile(dur, 99))
    _grows_linearly(make, launches.kernel_stats, 500)
    _grows_linearly(make, kernel_summary.kernel_times, 500)


def test_shortening_a_long_name_is_linear():
    from analysis_scale import name_of_length

    _grows_linearly(name_of_length, short_name, 4000)
    assert len(short_name(name_of_length(20_000))) <= 100
