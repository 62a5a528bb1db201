"""host_traces/matching.py's numpy pairing against the plain one it replaced: keys
(device, name, grid, block) paired in order, per key in the order keys first come
in the best window of ours, on random runs of few distinct keys."""

import types

import numpy as np
import pytest

from gpuobs.host_traces import matching
from gpuobs.host_traces.pooled_names import PooledNames
from gpuobs.host_traces.trace import KERNEL, Rows


def plain_pairs(rec, table, host) -> list:
    timed = np.flatnonzero(table.first_start > 0)
    timed = timed[np.argsort(table.first_start[timed], kind="stable")]
    launches = rec.launches

    def mine(i):
        return (
            int(launches["device_index"][i]),
            table.name[i],
            *launches["grid"][i].tolist(),
            *launches["block"][i].tolist(),
        )

    k = host.kernels
    theirs = [
        (int(k["device"][j]), host.names[k["name"][j]], *k["grid"][j].tolist(), *k["block"][j].tolist())
        for j in range(len(k))
    ]
    my_keys = [mine(i) for i in timed]
    lo, hi = 0, len(my_keys)
    if theirs and len(theirs) < len(my_keys):
        agree = [
            sum(a == b for a, b in zip(my_keys[s : s + len(theirs)], theirs))
            for s in range(len(my_keys) - len(theirs) + 1)
        ]
        lo = max(s for s in range(len(agree)) if agree[s] == max(agree))
        hi = lo + len(theirs)
    by_key, their_by_key = {}, {}
    for i, key in zip(timed[lo:hi].tolist(), my_keys[lo:hi]):
        by_key.setdefault(key, []).append(i)
    for j, key in enumerate(theirs):
        their_by_key.setdefault(key, []).append(j)
    return [(a, b) for key, ours in by_key.items() for a, b in zip(ours, their_by_key.get(key, []))]


@pytest.mark.parametrize("seed", range(60))
def test_numpy_pairing_is_the_plain_one(seed):
    rng = np.random.default_rng(seed)
    n, m, kinds = int(rng.integers(0, 50)), int(rng.integers(0, 50)), int(rng.integers(1, 4))
    launches = np.zeros(n, [("device_index", "<u4"), ("grid", "<u4", (3,)), ("block", "<u4", (3,))])
    launches["device_index"], launches["grid"][:, 0], launches["block"][:, 2] = (
        rng.integers(0, 2, n) for _ in range(3)
    )
    first = rng.integers(0, 6, n) * 10
    table = types.SimpleNamespace(
        first_start=first, last_end=first + 5, name=[f"k{int(x)}" for x in rng.integers(0, kinds, n)]
    )
    kernels = np.zeros(m, KERNEL)
    kernels["device"], kernels["grid"][:, 0], kernels["block"][:, 2] = (rng.integers(0, 2, m) for _ in range(3))
    names = [f"k{i}" for i in range(kinds)] + ["k0", "theirs"]  # a name given twice: one key; one only theirs
    kernels["name"], kernels["dur_ns"] = rng.integers(0, len(names), m), rng.integers(1, 9, m)
    rows = Rows(kernels, lambda r: types.SimpleNamespace(dur_ns=int(r["dur_ns"]), row=r.tobytes()))
    host = types.SimpleNamespace(kernels=rows, names=names)
    got = matching.match_kernels(types.SimpleNamespace(launches=launches), table, host)
    want = plain_pairs(types.SimpleNamespace(launches=launches), table, host)
    assert got.launch_index.tolist() == [a for a, _ in want]
    assert [k.row for k in got.host_kernel] == [kernels[b].tobytes() for _, b in want]
    assert got.unmatched_host == m - len(want)


def renumbered_every_column(rec, table, timed, host):
    """_key_codes as it was: each column folded in and the pairs renumbered densely at once."""
    k, columns = host.kernels, matching.key_columns(rec, table, timed, host)
    code = np.zeros(len(timed) + len(k), np.int64)
    for mine, theirs in columns:
        values, column = np.unique(
            np.concatenate([np.asarray(mine, np.int64), np.asarray(theirs, np.int64)]), return_inverse=True
        )
        code = np.unique(code * len(values) + column.reshape(-1), return_inverse=True)[1].reshape(-1)
    return code[: len(timed)], code[len(timed) :]


@pytest.mark.parametrize("seed", range(12))
def test_key_codes_are_those_renumbered_after_every_column(seed):
    """The codes folded as digits (renumbered where they would pass 2^62 and at the end)
    are those of renumbering after every column: constant columns, few and many values."""
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(0, 400)), int(rng.integers(0, 3000))
    spread = [1, 2, 300, 2**40][seed % 4]  # thousands of values in 6 columns: past 2^62, renumbered midway
    launches = np.zeros(n, [("device_index", "<u4"), ("grid", "<u4", (3,)), ("block", "<u4", (3,))])
    kernels = np.zeros(m, KERNEL)
    launches["device_index"], kernels["device"] = rng.integers(0, 2, n), rng.integers(0, 2, m)
    for field in ("grid", "block"):
        for i in range(3):
            top = spread if i != 1 or spread > 300 else 1  # y: one value, but where values are many
            launches[field][:, i] = rng.integers(0, min(top, 2**32), n)
            kernels[field][:, i] = rng.integers(0, top, m)
    names = [f"k{i}" for i in range(int(rng.integers(1, 400)))]
    kernels["name"] = rng.integers(0, len(names), m)
    table = types.SimpleNamespace(name=[f"k{int(x)}" for x in rng.integers(0, 500, n)])
    rec, host, timed = (
        types.SimpleNamespace(launches=launches),
        types.SimpleNamespace(kernels=kernels, names=names),
        rng.permutation(n),
    )
    got, want = matching._key_codes(rec, table, timed, host), renumbered_every_column(rec, table, timed, host)
    # the kernels of theirs with a name none of ours has share one code, of none of ours
    ours = {table.name[i] for i in timed.tolist()}
    foreign = np.array([names[j] not in ours for j in kernels["name"].tolist()], bool)
    want = (want[0], np.where(foreign, -1, want[1]))
    assert partition(np.concatenate(got)) == partition(np.concatenate(want))
    assert not np.isin(got[1][foreign], got[0]).any()
    if not foreign.any():  # then the folding is over all of them, as it was
        assert all(np.array_equal(a, b) for a, b in zip(got, want))


def every_name_coded(rec, table, timed, host) -> tuple[np.ndarray, np.ndarray]:
    """key_columns' name column as it was: every one of host.names coded, in order."""
    names: dict = {}
    mine = np.array([names.setdefault(table.name[i], len(names)) for i in timed.tolist()], np.int64)
    theirs = np.array([names.setdefault(n, len(names)) for n in host.names] + [0], np.int64)
    return mine, theirs[host.kernels["name"]]


def partition(codes: np.ndarray) -> list:
    """Which rows hold equal codes, whatever the codes are: each numbered by first use."""
    first: dict = {}
    return [first.setdefault(c, len(first)) for c in codes.tolist()]


@pytest.mark.parametrize("pooled", [False, True], ids=["list", "pooled"])
@pytest.mark.parametrize("seed", range(20))
def test_their_names_are_coded_by_ours(seed, pooled):
    """Their names looked up among ours (no code per name of theirs): ours equal where
    they were with every name coded, and each of theirs equal to each of ours where it
    was; names given twice (an unused copy before a used one), a name index of -1, none
    of ours, names only theirs."""
    rng = np.random.default_rng(seed)
    n, m = (
        0 if seed % 4 == 1 else int(rng.integers(0, 40)),
        int(rng.integers(0, 60)),
    )  # none of ours: -1's is names[0]'s
    pool = [f"k{i}" for i in range(int(rng.integers(1, 12)))]
    names = [pool[int(i)] for i in rng.integers(0, len(pool), int(rng.integers(1, 80)))] + ["theirs", "theirs too"]
    kernels = np.zeros(m, KERNEL)
    kernels["name"] = rng.integers(-1 if seed % 2 else 0, len(names), m)
    launches = np.zeros(n, [("device_index", "<u4"), ("grid", "<u4", (3,)), ("block", "<u4", (3,))])
    table = types.SimpleNamespace(name=[pool[int(i)] for i in rng.integers(0, len(pool), n)] + ["other"])
    rec, host = types.SimpleNamespace(launches=launches), types.SimpleNamespace(kernels=kernels, names=names)
    timed = rng.permutation(n)
    if pooled:  # the nsys C read's names: looked up by the pool (PooledNames.codes_in)
        host = types.SimpleNamespace(kernels=kernels, names=PooledNames.of(names))
    mine, theirs = matching.key_columns(rec, table, timed, host)[1]
    want_mine, want_theirs = every_name_coded(rec, table, timed, host)
    assert partition(mine) == partition(want_mine)
    assert np.array_equal(mine[:, None] == theirs[None, :], want_mine[:, None] == want_theirs[None, :])
