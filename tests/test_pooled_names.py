"""host_traces/pooled_names.py (the nsys C read's names as one UTF-8 pool) against the
lists of Python strings it replaces: the same names read back, the same lookups, the
same merging of equal names and first-use numbering, `string#N` written as f-strings."""

from itertools import repeat

import numpy as np
import pytest

from gpuobs.host_traces import nsys
from gpuobs.host_traces.pooled_names import PooledNames, numbered_names, numbered_numpy
from gpuobs.host_traces.trace import first_use_order
from gpuobs.perfetto_export import native_encoder

ODD = ["", " ", "a", "é", "漢字", "nul\x00inside", "\ufffd", "string#", "string#1", "string#01", "string#-0", "😀"]
EXTREMES = [0, 1, 9, 10, 99, 100, -1, -9, -10, 2**62, 2**63 - 1, -(2**63), -(2**63) + 1]


def _values(rng, n, negative=True):
    values = rng.integers(-(10**12) if negative else 0, 10**12, n)
    values[: min(n, 4)] = rng.integers(0, 1000, min(n, 4))
    return np.unique(values)  # distinct, as ids are


@pytest.mark.parametrize("seed", range(8))
def test_numbered_names_are_the_f_strings(seed):
    """numbered_names (C where built, numpy for negative values) and numbered_numpy give
    f"{prefix}{v}" of every value: int64's ends, 0, powers of ten, random."""
    rng = np.random.default_rng(seed)
    values = np.unique(np.array(EXTREMES + _values(rng, int(rng.integers(0, 300))).tolist(), np.int64))
    values = values[values >= 0] if seed % 2 else values
    for make in (numbered_names, numbered_numpy):
        got = make("string#", values)
        assert list(got) == [f"string#{v}" for v in values.tolist()]
        prefix, numbered, rows = got.numbered
        assert prefix == b"string#" and numbered.tolist() == values.tolist()
        assert rows.tolist() == list(range(len(values)))
    assert list(numbered_numpy("", np.zeros(0, np.int64))) == []


@pytest.mark.skipif(native_encoder.encoder() is None, reason="native encoder not built here")
def test_numbered_names_without_the_encoder_are_numpys(monkeypatch):
    values = np.arange(0, 5000, 7)
    with_c = numbered_names("string#", values)
    monkeypatch.setattr(native_encoder, "encoder", lambda: None)
    assert list(numbered_names("string#", values)) == list(with_c) == [f"string#{v}" for v in values.tolist()]


def _mixed(rng, n):
    """Names with None (NULL values), odd text, and a numbered part in the middle."""
    loose = [None if rng.random() < 0.1 else ODD[int(rng.integers(0, len(ODD)))] for _ in range(n)]
    made = numbered_names("string#", _values(rng, int(rng.integers(0, 30))))
    split = int(rng.integers(0, n + 1))
    pooled = PooledNames.joined([PooledNames.of(loose[:split]), made, PooledNames.of(loose[split:])])
    return pooled, loose[:split] + list(made) + loose[split:]


@pytest.mark.parametrize("seed", range(10))
def test_pooled_names_read_as_their_list(seed):
    """Indexing (negative too), iteration, ==, take and of_bytes read as the list would."""
    rng = np.random.default_rng(seed)
    pooled, names = _mixed(rng, int(rng.integers(0, 40)))
    assert len(pooled) == len(names) and list(pooled) == names and pooled == names and names == pooled
    assert [pooled[i] for i in range(-len(names), len(names))] == names + names
    with pytest.raises(IndexError):
        pooled[len(names)]
    index = rng.integers(0, max(1, len(names)), 20) if names else np.zeros(0, np.int64)
    assert list(pooled.take(index)) == [names[i] for i in index.tolist()]
    assert pooled != names + ["x"]
    text = [n for n in names if n is not None]
    assert list(PooledNames.of_bytes([t.encode() for t in text])) == text


@pytest.mark.parametrize("seed", range(10))
def test_codes_in_is_the_dict_lookup(seed):
    """codes_in(table, default) against map(table.get, names, repeat(default)), as
    matching looked them up: keys of every length, a key with a lone surrogate, int and
    None keys, None names (a NULL value equals no key)."""
    rng = np.random.default_rng(seed)
    pooled, names = _mixed(rng, int(rng.integers(0, 60)))
    keys = [n for n in names if n is not None and rng.random() < 0.5] + ["\ud800", "absent", "string#12"]
    table: dict = {}
    for key in keys + [7, None]:
        table.setdefault(key, len(table))
    got = pooled.codes_in(table, len(table))
    want = np.array(list(map(table.get, names, repeat(len(table)))), np.int64).reshape(-1)
    assert got.dtype == np.int64 and got.tolist() == want.tolist()


def _first_equal(names: list) -> list:
    """Each name's first equal one, by dict: merged_with's answer."""
    first: dict = {}
    return [first.setdefault(n, i) for i, n in enumerate(names)]


@pytest.mark.parametrize("seed", range(12))
def test_merged_with_finds_equal_names(seed):
    """merged_with against a dict of every name: equal loose names, None with None
    only, loose names spelled as a numbered one (exactly: not `string#01` for 1), or not
    equal to any; None where no two are equal."""
    rng = np.random.default_rng(seed)
    values = _values(rng, int(rng.integers(1, 30)))
    spelled = [f"string#{v}" for v in rng.choice(values, 3).tolist()] + ["string#0" + str(abs(int(values[0])))]
    loose = [spelled[int(i)] if rng.random() < 0.3 else ODD[int(i) % len(ODD)] for i in rng.integers(0, 4, 20)]
    if seed % 3 == 0:
        loose = list(dict.fromkeys(loose))  # some without two equal
    made = numbered_names("string#", values)
    pooled = PooledNames.joined([made, PooledNames.of(loose)] if seed % 2 else [PooledNames.of(loose), made])
    names = list(pooled)
    want = _first_equal(names)
    got = pooled.merged_with()
    if want == list(range(len(names))):
        assert got is None
    else:
        assert got.tolist() == want


@pytest.mark.parametrize("seed", range(16))
def test_first_use_order_of_pooled_names_is_the_lists(seed):
    """first_use_order of PooledNames (merged by the pool) against first_use_order of
    the same names as a list (merged by a dict): the same ranks and names in order;
    unused names, equal ones, every name used in order."""
    rng = np.random.default_rng(seed)
    pooled, names = _mixed(rng, int(rng.integers(1, 50)))
    if seed % 4 == 0:
        codes = np.arange(len(names))
    else:
        codes = rng.integers(0, len(names), int(rng.integers(0, 400)))
    codes = codes.astype([np.int32, np.int64][seed % 2])
    rank, ordered = first_use_order(codes, pooled)
    want_rank, want = first_use_order(codes, list(names))
    assert isinstance(ordered, PooledNames) and list(ordered) == want
    assert rank.tolist() == want_rank.tolist()


def test_interned_names_of_pooled_names_are_the_lists():
    from gpuobs.perfetto_export import host_tracks

    rng = np.random.default_rng(3)
    pooled, names = _mixed(rng, 300)
    assert b"".join(host_tracks._interned_packet(7, pooled)) == b"".join(host_tracks._interned_packet(7, names))


@pytest.mark.parametrize("seed", range(8))
def test_id_names_are_the_lookups(seed):
    """nsys._id_names against [strings.get(i, f"string#{i}") for i in ids], the code it
    replaces: integer keys, REAL ones (5.0 finds 5), NULL values, negative and large ids."""
    rng = np.random.default_rng(seed)
    ids = np.unique(np.array(EXTREMES + _values(rng, int(rng.integers(0, 200))).tolist(), np.int64))
    strings = {}
    for i in rng.choice(ids, int(rng.integers(0, len(ids))), replace=False).tolist():
        strings[float(i) if seed % 3 == 1 and abs(i) < 2**40 else i] = (
            None if rng.random() < 0.1 else ODD[int(rng.integers(0, len(ODD)))]
        )
    strings[-123456789] = "an id not asked for"
    got = nsys._id_names(ids, strings)
    assert list(got) == [strings.get(i, f"string#{i}") for i in ids.tolist()]
    assert got.merged_with() is None or got.merged_with().tolist() == _first_equal(list(got))


@pytest.mark.parametrize("seed", range(8))
def test_sorted_union_is_union1d(seed):
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(-50, 50, int(rng.integers(0, 40))))
    some = [int(x) for x in rng.integers(-60, 60, int(rng.integers(1, 6)))]
    for more in ([], some, [ids.tolist()[0]] if len(ids) else []):
        got = nsys._sorted_union(ids, more)
        want = np.union1d(ids, np.array(more, np.int64))
        assert got.dtype == np.int64 and got.tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(6))
def test_head_keeps_the_first_names_and_which_are_numbered(seed):
    rng = np.random.default_rng(seed)
    pooled, names = _mixed(rng, int(rng.integers(0, 40)))
    for k in (0, len(names) // 2, len(names)):
        head = pooled.head(k)
        assert list(head) == names[:k]
        merged = head.merged_with()
        assert (merged is None and _first_equal(names[:k]) == list(range(k))) or merged.tolist() == _first_equal(
            names[:k]
        )
        if pooled.numbered is not None:
            assert all(names[r] == f"string#{v}" for v, r in zip(*(c.tolist() for c in head.numbered[1:])))
