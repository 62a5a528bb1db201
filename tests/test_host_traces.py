"""A separate run's PyTorch-profiler trace beside the gpuobs tracks. The real
capture from the H200 is still to come (issue 6); until then the Kineto file here
is made in the documented format from the synthetic recording's own launches."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import gpuobs
from gpuobs.analysis import launches as analysis
from gpuobs.cli import app
from gpuobs.host_traces.kineto import HostTraceError, load_kineto
from gpuobs.perfetto_export.export import ExportOptions, export

from .trace_decode import decode

BASE = 1_732_000_000_000_000_000 - 10**9  # baseTimeNanoseconds of the other run


def kineto_of(rec, path, speedup=2.0, shift_ns=5 * 10**9):
    """A Kineto-shaped trace of an uninstrumented run: the same launches, shorter, elsewhere in time."""
    table = analysis.launch_table(rec)
    events = [{"ph": "M", "name": "thread_name", "pid": 4242, "tid": 11, "args": {"name": "python"}}]
    for i, launch in enumerate(rec.launches):
        start = int(table.first_start[i]) + shift_ns
        dur = (int(table.last_end[i]) - int(table.first_start[i])) / speedup
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 4242,
                "tid": 11,
                "ts": (start - 3000 - BASE) / 1000,
                "dur": 2.5,
                "args": {"correlation": i},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": table.name[i],
                "pid": 0,
                "tid": 7,
                "ts": (start - BASE) / 1000,
                "dur": dur / 1000,
                "args": {
                    "device": 0,
                    "stream": 7,
                    "correlation": i,
                    "grid": [int(v) for v in launch["grid"]],
                    "block": [int(v) for v in launch["block"]],
                },
            }
        )
    path.write_text(json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": BASE, "traceEvents": events}))
    return path


def test_kineto_events_land_on_realtime_with_their_own_tracks(tmp_path, block_recording):
    rec = gpuobs.load(block_recording)
    host = load_kineto(kineto_of(rec, tmp_path / "prof.json"))
    assert len(host.kernels) == len(rec.launches) == 12 and len(host.events) == 24
    summary = export([rec], tmp_path / "t.pftrace", hosts=[host])
    d = decode(tmp_path / "t.pftrace")
    assert d.problems == []
    h = summary.hosts[0]
    assert h.matched == 12 and h.unmatched_host == 0 and h.clock == "REALTIME"
    for row in h.per_kernel:
        assert row["ratio"] == pytest.approx(2.0, rel=1e-3)  # instrumented span / uninstrumented duration
    kernels = [s for s in d.slices if d.tracks[s[0]].name == "Kernels"]
    assert all(k[4]["instrumentation_cost"] == "2.00x" for k in kernels)
    names = {t.name for t in d.tracks.values()}
    assert {"GPU 0", "stream 7", "pid 4242", "python"} <= names
    host_slices = [s for s in d.slices if d.tracks[s[0]].name == "stream 7"]
    assert len(host_slices) == 12


def test_align_kernels_shifts_and_says_so(tmp_path, block_recording):
    rec = gpuobs.load(block_recording)
    host = load_kineto(kineto_of(rec, tmp_path / "prof.json", shift_ns=7 * 10**9))
    summary = export([rec], tmp_path / "a.pftrace", ExportOptions(align="kernels"), hosts=[host])
    h = summary.hosts[0]
    # gpuobs kernel starts on REALTIME = device - measured offset; the other run started 7 s later
    clock_offset = 568_000 - 1_000  # synthetic: device = realtime_mid + offset (the bracket is skewed by 1 us)
    assert h.shift_ns == pytest.approx(-7 * 10**9 - clock_offset, abs=2_000)
    assert h.residual_ns < 2_000
    d = decode(tmp_path / "a.pftrace")
    group = [t for t in d.tracks.values() if t.name.startswith("PyTorch profiler run")][0]
    assert "shifted" in group.name and "SHIFTED" in group.description


def test_bad_host_files_are_clear_errors(tmp_path, block_recording):
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(HostTraceError, match="not JSON"):
        load_kineto(bad)
    bad.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(HostTraceError, match="baseTimeNanoseconds"):
        load_kineto(bad)
    r = CliRunner().invoke(app, ["export", str(block_recording), "--host", str(bad), "-o", str(tmp_path / "t.pftrace")])
    assert r.exit_code == 2 and "baseTimeNanoseconds" in r.output


def test_cli_prints_the_per_kernel_cost(tmp_path, block_recording):
    rec = gpuobs.load(block_recording)
    prof = kineto_of(rec, tmp_path / "prof.json", speedup=4.0)
    r = CliRunner().invoke(
        app, ["export", str(block_recording), "--host", str(prof), "-o", str(tmp_path / "t.pftrace")]
    )
    assert r.exit_code == 0, r.output
    assert "12 of 12 kernels matched" in r.output and "(4.00x)" in r.output


def _first_use_order_by_sorting(codes, values):
    """trace.first_use_order as it was: first rows found by np.unique's sort."""
    rank = np.full(len(values), -1, np.int64)
    if not len(codes):
        return rank, []
    used, first = np.unique(codes, return_index=True)
    number: dict = {}
    for code in used[np.argsort(first, kind="stable")].tolist():
        rank[code] = number.setdefault(values[code], len(number))
    return rank, list(number)


@pytest.mark.parametrize("seed", range(20))
def test_first_use_order_is_the_sorting_one(seed):
    """first_use_order's one-pass first rows give the renumbering np.unique's did: unused
    codes, equal values (merged), one code, int32 and int64 codes."""
    from gpuobs.host_traces.trace import first_use_order

    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 60))
    values = [f"v{int(x)}" for x in rng.integers(0, max(1, size // 2), size)]
    codes = rng.integers(0, int(rng.integers(1, size + 1)), int(rng.integers(0, 3000))).astype(
        [np.int32, np.int64][seed % 2]
    )
    got, want = first_use_order(codes, values), _first_use_order_by_sorting(codes, values)
    assert np.array_equal(got[0], want[0]) and got[1] == want[1]


@pytest.mark.parametrize("seed", range(16))
def test_unique_inverse_is_np_unique(seed):
    """trace.unique_inverse against np.unique(return_inverse, return_index): rising values (no
    sort), a few rising runs (a stable sort), many (np.unique itself), empty, one value,
    repeats across runs, int64's ends, unsigned, int32, bool; the same arrays and dtypes."""
    from gpuobs.host_traces.trace import FEW_RUNS, unique_inverse

    rng = np.random.default_rng(seed)
    dtype = [np.int64, np.uint64, np.int32, np.bool_][seed % 4]
    top = 2 if dtype is np.bool_ else 40
    runs = [0, 1, 2, FEW_RUNS, FEW_RUNS + 1, FEW_RUNS + 2, 500][seed % 7]
    size = int(rng.integers(0, 3000)) if seed % 5 else int(rng.integers(0, 2))
    values = rng.integers(0, top, size).astype(dtype)
    if dtype is np.int64 and size:
        values[rng.integers(0, size, 3)] = [-(1 << 63), (1 << 63) - 1, -1]
    values = np.concatenate([np.sort(part) for part in np.array_split(values, runs + 1)]) if size else values
    for with_index in (False, True):
        got = unique_inverse(values, return_index=with_index)
        want = np.unique(values, return_index=with_index, return_inverse=True)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)
        # an int32 inverse where asked, the same numbers (the other arrays as np.unique's)
        got = unique_inverse(values, return_index=with_index, index_dtype=np.int32)
        assert got[-1].dtype == np.int32 and np.array_equal(got[-1], want[-1])
        for g, w in zip(got[:-1], want[:-1]):
            assert g.dtype == w.dtype and np.array_equal(g, w)


@pytest.mark.parametrize("seed", range(8))
def test_first_use_order_of_codes_used_in_order(seed):
    """first_use_order where codes are first used in their own order (no sort), and where every
    code is (names: the list itself; TrackKeys: their columns), against the sorting one."""
    from gpuobs.host_traces.trace import TrackKeys, first_use_order

    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 50))
    values = [f"v{int(x)}" for x in rng.integers(0, max(1, size // (1 + seed % 3)), size)]
    used = size if seed % 2 else int(rng.integers(1, size + 1))
    codes = np.concatenate([np.arange(used), rng.integers(0, used, int(rng.integers(0, 200)))])
    got, want = first_use_order(codes, values), _first_use_order_by_sorting(codes, values)
    assert np.array_equal(got[0], want[0]) and got[1] == want[1]
    keys = TrackKeys(("thread", "nvtx"), rng.integers(0, 2, size), np.arange(size), rng.integers(0, 5, size))
    rank, ordered = first_use_order(codes, keys)
    want_rank, want_keys = _first_use_order_by_sorting(codes, list(keys))
    assert rank.tolist() == want_rank.tolist() and list(ordered) == want_keys and ordered is not keys


@pytest.mark.parametrize("seed", range(12))
def test_assemble_skips_only_renumberings_that_keep_codes(seed, monkeypatch):
    """assemble leaves a column as it is only where first_use_order's rank keeps every
    used code: the same rows as gathering through the rank every time (codes first used
    in their own order, with unused ones between; and shuffled, where it must gather)."""
    from gpuobs.host_traces import trace

    rng = np.random.default_rng(seed)
    n, values = int(rng.integers(1, 300)), [f"v{i}" for i in range(40)]
    in_order = np.sort(rng.choice(40, 12, replace=False))
    codes = in_order[np.maximum.accumulate(rng.integers(0, 12, n))] if seed % 2 else rng.integers(0, 40, n)
    events = np.zeros(n, trace.EVENT)
    events["start_ns"] = np.arange(n)
    for column in ("name", "track", "category"):
        events[column] = codes if seed % 3 else rng.permutation(codes)
    kernels = np.zeros(min(n, 5), trace.KERNEL)
    kernels["name"] = events["name"][: len(kernels)]

    def made(always_gather: bool):
        with monkeypatch.context() as m:
            if always_gather:
                m.setattr(trace, "_keeps_codes", lambda rank: False)
            host = trace.assemble("p", "nsys", events.copy(), kernels.copy(), values, list(values), values)
        return host.events.rows, host.kernels.rows, host.names, host.tracks, host.categories

    got, want = made(False), made(True)
    assert all(np.array_equal(a, b) for a, b in zip(got[:2], want[:2])) and got[2:] == want[2:]
    keeps = np.full(40, -1)
    keeps[in_order] = in_order
    assert trace._keeps_codes(keeps) and trace._keeps_codes(np.full(3, -1)) and trace._keeps_codes(np.arange(4))
    assert not trace._keeps_codes(np.array([1, 0])) and not trace._keeps_codes(np.array([-1, 0, 2]))


def _in_order_by_sorting(codes):
    """k where codes first use 0..k-1 in that order, by np.unique's first rows; else None."""
    if not len(codes):
        return None
    used, first = np.unique(codes, return_index=True)
    if np.array_equal(used, np.arange(len(used))) and np.all(first[1:] > first[:-1]):
        return len(used)
    return None


@pytest.mark.parametrize("block", [1, 7, 1 << 16, "c"])
@pytest.mark.parametrize("seed", range(16))
def test_count_in_order_is_the_sorting_ones(seed, block, monkeypatch):
    """count_in_order, numpy a block at a time or native_encoder.c's one pass, against
    np.unique's first rows: codes first used in order (repeats between), a number
    skipped, one first used early, a negative code, one code, empty; int32, int64,
    uint64 (one past int64), int16 and a structured array's field (strided)."""
    from gpuobs.host_traces import trace
    from gpuobs.perfetto_export import native_encoder

    if block == "c":
        if native_encoder.encoder() is None:
            pytest.skip("no C compiler here")
        monkeypatch.setattr(trace, "IN_ORDER_BLOCK", None)  # the numpy loop would fail
    else:
        monkeypatch.setattr(native_encoder, "encoder", lambda: None)
        monkeypatch.setattr(trace, "IN_ORDER_BLOCK", block)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400)) if seed % 6 else int(rng.integers(0, 2))
    new = rng.random(n) < 0.5  # a first use, else a code used before (any of them)
    if n:
        new[0] = True
    top = np.cumsum(new) - 1
    codes = np.where(new, top, (rng.random(n) * (top + 1)).astype(np.int64))
    if n > 3 and seed % 4 == 1:
        codes[int(rng.integers(1, n))] += 2  # a number skipped, or one used before its turn
    if n > 3 and seed % 4 == 2 and not new.all():
        codes[int(rng.choice(np.flatnonzero(~new)))] = -1  # in place of a repeat: the order kept otherwise
    dtype = [np.int64, np.int32, np.uint64, np.int16][seed % 4] if not (codes < 0).any() else np.int64
    codes = codes.astype(dtype)
    if dtype == np.uint64 and n > 2 and seed % 8 == 6 and block == "c":
        codes[-1] = np.uint64(2**63)  # reads as a negative int64: never the next number
    if seed % 5 == 4:  # a field of records, read where it lies
        rows = np.zeros(len(codes), [("pad", np.uint8), ("code", codes.dtype)])
        rows["code"] = codes
        codes = rows["code"]
    assert trace.count_in_order(codes) == _in_order_by_sorting(codes)


@pytest.mark.parametrize("path", ["numpy", "c"])
def test_count_in_order_at_its_edges(path, monkeypatch):
    from gpuobs.host_traces import trace
    from gpuobs.perfetto_export import native_encoder

    if path == "numpy":
        monkeypatch.setattr(native_encoder, "encoder", lambda: None)
    elif native_encoder.encoder() is None:
        pytest.skip("no C compiler here")
    cases = {(0,): 1, (0, 0, 1, 0, 2): 3, (1,): None, (0, 2): None, (0, 1, 3, 2): None, (0, -1, 1): None, (): None}
    for codes, want in cases.items():
        assert trace.count_in_order(np.array(codes, np.int64)) == want, codes


@pytest.mark.parametrize("path", ["numpy", "c"])
def test_count_in_order_of_a_byte_swapped_column(path, monkeypatch):
    """Codes of the other byte order are read as numbers, not as native bytes (C would
    read [0, 256] big-endian as [0, 1])."""
    from gpuobs.host_traces import trace
    from gpuobs.perfetto_export import native_encoder

    if path == "numpy":
        monkeypatch.setattr(native_encoder, "encoder", lambda: None)
    elif native_encoder.encoder() is None:
        pytest.skip("no C compiler here")
    swapped = ">" if np.little_endian else "<"
    for codes, want in {(0, 256): None, (0, 1, 0, 2): 3, (1, 0): None}.items():
        for size in (2, 4, 8):
            assert trace.count_in_order(np.array(codes, f"{swapped}i{size}")) == want, (codes, size)


@pytest.mark.parametrize("seed", range(12))
def test_first_use_kept_is_first_use_orders(seed):
    """_first_use_kept, where it answers, gives first_use_order's values with a rank that
    keeps every code; it declines where two used values are equal (names as a list and
    pooled, TrackKeys) or the codes are not in order."""
    from gpuobs.host_traces import trace
    from gpuobs.host_traces.pooled_names import PooledNames
    from gpuobs.host_traces.trace import TrackKeys, first_use_order

    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 30))
    codes = np.concatenate([np.arange(k), rng.integers(0, k, int(rng.integers(0, 100)))])
    if seed % 3 == 1:
        codes = rng.permutation(codes)
    names = [f"v{i}" for i in range(k + 5)]
    if seed % 2:
        names[int(rng.integers(1, k + 5))] = names[0]  # two equal: used, or not
    keys = TrackKeys(("thread",), np.zeros(k + 5, np.int64), np.arange(k + 5), np.zeros(k + 5, np.int64))
    for values in (names, PooledNames.of(names), keys):
        kept = trace._first_use_kept(codes, values)
        rank, want = first_use_order(codes, values)
        if kept is None:
            assert seed % 3 == 1 or len(set(names[:k])) < k
        else:
            assert list(kept) == list(want) and trace._keeps_codes(rank)
