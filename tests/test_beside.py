"""beside.Beside: a call on a thread of its own, its result or its exception taken in
the caller's thread; and the nsys read's track keys found on one, as they were found
in line."""

import threading

import numpy as np
import pytest

from gpuobs.beside import Beside
from gpuobs.host_traces import nsys
from gpuobs.host_traces.trace import TrackKeys


def test_the_result_comes_from_another_thread():
    caller = threading.get_ident()
    job = Beside(lambda a, b: (threading.get_ident(), a + b), 2, 3)
    thread, total = job.result()
    assert total == 5 and thread != caller
    assert job.result()[1] == 5  # asked again: the same


def test_the_call_s_exception_is_raised_in_the_caller():
    def fails():
        raise MemoryError("none left")

    job = Beside(fails)
    job.join()  # no raise: for a caller leaving on an error of its own
    with pytest.raises(MemoryError, match="none left"):
        job.result()


def test_a_call_runs_beside_the_caller():
    go = threading.Event()
    job = Beside(lambda: go.wait(10))
    assert job._thread.is_alive()  # waiting on the caller, which is not waiting on it
    go.set()
    assert job.result() is True


@pytest.mark.parametrize("runtime", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_track_keys_are_those_of_every_part_at_once(seed, runtime):
    rng = np.random.default_rng(seed)
    streams = rng.integers(0, [4, 1 << 40 if seed % 3 == 2 else 50], (int(rng.integers(0, 30)), 2))
    gtids = [rng.integers(0, 1 << 48, int(rng.integers(0, 30))) for _ in range(2 if runtime else 1)]
    keys = [streams] + [np.stack([g, np.zeros_like(g)], axis=1) for g in gtids]
    got, got_of, sizes = nsys._track_keys(keys, runtime)
    kinds = [0] * len(streams) + [k for i, g in enumerate(gtids) for k in [1 + i + (not runtime)] * len(g)]
    pids = [(int(g) >> 24) & 0xFFFFFF for part in gtids for g in part]
    tids = [int(g) & 0xFFFFFF for part in gtids for g in part]
    want, want_of = TrackKeys.distinct(
        ("stream", "thread", "nvtx"), kinds, streams[:, 0].tolist() + pids, streams[:, 1].tolist() + tids
    )
    assert list(got) == list(want) and got_of.tolist() == want_of.tolist() and got_of.dtype == np.int32
    assert sizes == [len(k) for k in keys]
