"""`gpuobs metrics --once`: the recording's counts in Prometheus's text format, with at
most --top kernels named per GPU; a kernel once named stays named as the file grows."""

import pytest
from cli_helpers import DATA, gpuobs

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from gpuobs.analysis.launches import kernel_stats  # noqa: E402
from gpuobs.metrics.follow import OTHER, Follower  # noqa: E402
from gpuobs.recording_file.reader import load  # noqa: E402

SAMPLE = DATA / "decode_block_trace.gpuobs"


def _samples(text):
    return {
        (s.name, s.labels.get("kernel")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_once_prints_stats_counts_with_bounded_kernels():
    r = gpuobs("metrics", SAMPLE, "--once", "--top", "5")
    assert r.returncode == 0, r.stderr
    got = _samples(r.stdout)
    rows = kernel_stats(load(SAMPLE))
    launches = {k: v for (name, k), v in got.items() if name == "gpuobs_kernel_launches_total"}
    assert len(launches) == 6 and OTHER in launches
    assert sum(launches.values()) == sum(r["launches"] for r in rows)
    blocks = sum(v for (name, _), v in got.items() if name == "gpuobs_kernel_blocks_total")
    assert blocks == sum(r["counted"] for r in rows) > 0
    top = sorted(rows, key=lambda r: (-r["launches"], r["kernel"]))[:5]
    assert sorted(v for k, v in launches.items() if k != OTHER) == sorted(r["launches"] for r in top)
    assert got[("gpuobs_flushes_total", None)] == len(load(SAMPLE).flushes)


def test_a_named_kernel_stays_named(tmp_path):
    follower = Follower(SAMPLE, top=2)
    follower.poll()
    first = list(follower.named[0])
    follower.size = -1  # as if the file had grown
    follower.top = 1  # a new reading may rank others first: the named ones keep their labels
    follower.poll()
    assert follower.named[0] == first and len({k for _, k in follower.snapshot.kernels}) == 3


def test_bad_input_is_one_line(tmp_path):
    r = gpuobs("metrics", tmp_path / "none.gpuobs", "--once")
    assert r.returncode == 2 and r.stderr.startswith("gpuobs: no recording at")
    r = gpuobs("metrics", SAMPLE, "--interval", "5")
    assert r.returncode == 2 and "--interval" in r.stderr and "no unit" in r.stderr
