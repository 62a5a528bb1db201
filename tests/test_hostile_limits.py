"""Limits that follow the file: reading an nsys export runs under SQLite's progress
handler with a time budget that grows with the file's size, so a schema made to
be slow (a virtual generated column computed on every read) is stopped with one
clear line. Here the budget is spent before the first query."""

import pytest

from gpuobs.host_traces import nsys
from gpuobs.host_traces.trace import HostTraceError

from .nsys_fixture import build
from .test_host_trace_inputs import PROFILER


def test_reading_past_the_budget_is_stopped(tmp_path, monkeypatch):
    path = tmp_path / "run.sqlite"
    build(PROFILER, path, ts_normalize=False)
    assert len(nsys.load_nsys(path).kernels)  # within the budget: read
    monkeypatch.setattr(nsys, "QUERY_BUDGET_S", -1.0)
    with pytest.raises(HostTraceError, match=r"run.sqlite: reading it took over -1 s, stopped") as caught:
        nsys.load_nsys(path)
    assert "\n" not in str(caught.value)
