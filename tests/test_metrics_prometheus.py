"""`gpuobs metrics`: a real Prometheus server (Debian's `prometheus`, installed by
tests/run.sh as root) scrapes a recording that grows flush by flush; what it stores
equals the recording's counts, each flush within two scrape intervals, with at most
--top kernels named."""

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest
from cli_helpers import gpuobs_cmd, repo_env

pytest.importorskip("prometheus_client")
from gpuobs.recording_file import schema  # noqa: E402
from gpuobs.recording_file.recording_writer import RecordingWriter  # noqa: E402

PROMETHEUS = shutil.which("prometheus")
if PROMETHEUS is None and os.environ.get("GPUOBS_REQUIRE_PROMETHEUS") != "1":
    pytest.skip("no prometheus binary (tests/run.sh installs Debian's as root)", allow_module_level=True)

SCRAPE_S = 1
FOLLOW_S = 0.2
KERNELS = 12
TOP = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.read().decode()


def _wait(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
            if value is not None:
                return value
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class GrowingRecording:
    """A block_counter recording written flush by flush, unbuffered, as the tool appends to it."""

    def __init__(self, path):
        self.fh = open(path, "wb", buffering=0)
        self.w = RecordingWriter(self.fh)
        self.w.run(pid=4242, mode=schema.Mode.BLOCK_COUNTER, capacity=1 << 16, argv=["python3", "serve.py"])
        self.w.device(name="NVIDIA H200", sm_count=132)
        self.w.module(module_id=1)
        for slot in range(KERNELS):
            self.w.function(function_slot=slot, mangled=f"_Z{slot}k", demangled=f"kernel_{slot:02d}")
        self.next_id, self.seq = 1, 0
        self.launches = {slot: 0 for slot in range(KERNELS)}
        self.blocks = 0

    def flush(self):
        """One flush window: kernel k launched KERNELS - k times, each of 64 * (k + 1) blocks."""
        slots = np.repeat(np.arange(KERNELS), np.arange(KERNELS, 0, -1))
        launches = np.zeros(len(slots), schema.dtype("gpuobs_launch"))
        launches["launch_id"] = np.arange(self.next_id, self.next_id + len(slots))
        launches["grid_id"] = 10_000 + launches["launch_id"]
        launches["function_slot"] = slots
        launches["grid"][:, 0] = 64 * (slots + 1)
        launches["grid"][:, 1:] = 1
        launches["block"] = (128, 1, 1)
        counts = np.zeros(len(slots), schema.dtype("gpuobs_launch_count"))
        counts["grid_id"] = launches["grid_id"]
        counts["count"] = 64 * (slots + 1)
        counts["launches_sharing"] = 1
        self.w.launches(launches)
        self.w.flush(flush_seq=self.seq, attempted=0, recorded=0, dropped=0, launch_counts=counts)
        self.next_id += len(slots)
        self.seq += 1
        for s in slots:
            self.launches[int(s)] += 1
        self.blocks += int(counts["count"].sum())

    def close(self):
        self.fh.close()


@pytest.fixture
def prometheus(tmp_path):
    target, web = _free_port(), _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {SCRAPE_S}s\n  scrape_timeout: {SCRAPE_S}s\n"
        f"scrape_configs:\n  - job_name: gpuobs\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
    )
    server = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "prometheus.log", "w"),
    )
    try:
        if server.poll() is None:
            time.sleep(0.2)
        assert server.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
        _wait(lambda: _get(f"http://127.0.0.1:{web}/-/ready")[0] == 200 or None, 30, "Prometheus to be ready")
        yield target, web
    finally:
        server.terminate()
        server.wait(timeout=10)


def _query(web: int, promql: str) -> list:
    status, body = _get(f"http://127.0.0.1:{web}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    return json.loads(body)["data"]["result"]


def _value(web: int, promql: str):
    result = _query(web, promql)
    return float(result[0]["value"][1]) if result else None


def test_prometheus_scrapes_the_growing_recordings_counts(tmp_path, prometheus):
    target, web = prometheus
    path = tmp_path / "gpuobs.gpuobs"
    rec = GrowingRecording(path)
    rec.flush()
    follower = subprocess.Popen(
        gpuobs_cmd(
            *map(str, ("metrics", path, "--port", target, "--interval", f"{int(FOLLOW_S * 1000)}ms", "--top", TOP))
        ),
        env=repo_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        total = "sum(gpuobs_kernel_launches_total)"
        _wait(lambda: _value(web, total) == sum(rec.launches.values()) or None, 20, "the first flush in Prometheus")
        waits = []
        for _ in range(3):
            rec.flush()
            written = time.monotonic()
            want = sum(rec.launches.values())
            _wait(lambda w=want: _value(web, total) == w or None, 10, "the next flush in Prometheus")
            waits.append(time.monotonic() - written)
        # each flush visible within two scrape intervals (plus the follower's look and the query)
        print(f"flush to Prometheus: {[round(w, 2) for w in waits]} s")
        assert max(waits) <= 2 * SCRAPE_S + FOLLOW_S + 0.5, waits
        series = _query(web, "gpuobs_kernel_launches_total")
        by_kernel = {s["metric"]["kernel"]: float(s["value"][1]) for s in series}
        assert len(by_kernel) == TOP + 1  # bounded: the top kernels and "other"
        named = {f"kernel_{k:02d}": float(rec.launches[k]) for k in range(TOP)}
        assert {k: v for k, v in by_kernel.items() if k != "other"} == named
        assert by_kernel["other"] == sum(rec.launches[k] for k in range(TOP, KERNELS))
        assert _value(web, "sum(gpuobs_kernel_blocks_total)") == rec.blocks
        assert _value(web, "gpuobs_flushes_total") == rec.seq
        assert all(s["metric"]["pid"] == "4242" and s["metric"]["gpu"] == "0" for s in series)
    finally:
        follower.terminate()
        follower.wait(timeout=10)
        rec.close()
