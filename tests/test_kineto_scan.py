"""The C scan of a Kineto trace's traceEvents (host_traces/kineto_scan.c) reads what
kineto.py's Python reading reads: the same events, kernels, names, tracks and
thread names for valid traces of every shape it takes, the same errors (with line
and column) after the array, and it stops, leaving the file to Python, on anything
it does not take."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpuobs.host_traces import kineto, kineto_scan
from gpuobs.host_traces.trace import HostTraceError

from .test_host_trace_inputs import kernel

BASE = 1_790_857_026_000_000_000
PROFILER = Path(__file__).resolve().parents[1] / "examples" / "data" / "side_by_side_profiler.json"

pytestmark = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler")


def scanned(path):
    lib = kineto_scan.library()
    assert lib is not None
    return kineto._load(Path(path), kineto_scan.Scan(lib))


def in_python(path):
    return kineto._load(Path(path), None)


def assert_same(a, b):
    assert np.array_equal(a.events.rows, b.events.rows)
    assert np.array_equal(a.kernels.rows, b.kernels.rows)
    assert (a.names, a.tracks, a.categories) == (b.names, b.tracks, b.categories)
    assert (a.thread_names, a.process_names, a.base_ns) == (b.thread_names, b.process_names, b.base_ns)


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode())
    return path


def doc(events: list, **top) -> str:
    return json.dumps({"traceEvents": events, "baseTimeNanoseconds": BASE, **top}, ensure_ascii=False)


KERNEL = kernel()  # the kernel event of test_host_trace_inputs
OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 803, "tid": 803, "ts": 5, "dur": 1}

TAKEN = {
    "kernels and ops": doc([KERNEL, OP, dict(OP, name="aten::add", ts=7.25)]),
    "escapes and non-ASCII": doc([dict(OP, name='a"b\\c/\b\f\n\r\t é 😀 \u2028'), dict(OP, cat="cpu_öp")]).replace(
        "é", "\\u00e9", 1
    ),
    "a surrogate pair written out": doc([dict(OP, name="x")]).replace('"x"', '"\\ud83d\\ude00 and \\u00e9"'),
    "names of pids and tids, none, null": doc(
        [dict(OP, pid="Spans", tid="Traces"), {k: v for k, v in OP.items() if k not in ("pid", "tid")}]
        + [dict(OP, tid=None), dict(OP, pid=-5, tid=2**59)]
    ),
    "metadata": doc(
        [
            {"ph": "M", "name": "thread_name", "pid": 803, "tid": 803, "args": {"name": "python3"}},
            {"ph": "M", "name": "process_name", "pid": 803, "tid": "x", "args": {"name": "train"}},
            {"ph": "M", "name": "process_name", "pid": 0, "args": 5},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2},
            {"ph": "M", "name": "thread_name", "pid": 803, "tid": 803, "args": {"name": "later"}},
            {"ph": "M", "name": "process_sort_index", "pid": [1], "args": {"sort_index": 3}},
            {"ph": "M", "name": 5},
            OP,
        ]
    ),
    "defaults": doc([{"ph": "X", "ts": 1}, {"ph": "X", "ts": 2, "cat": "kernel", "args": {}}, {"ph": "X", "ts": 0}]),
    "GPU events by pid and tid": doc(
        [
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy", "pid": 1, "tid": 9, "ts": 3, "dur": 1},
            {"ph": "X", "cat": "gpu_user_annotation", "name": "step", "pid": 0, "ts": 3},
            dict(KERNEL, args={"grid": None, "device": 2}),
            dict(KERNEL, args=[1, 2]),
            dict(KERNEL, args={"correlation": -(2**59), "stream": 2**59, "block": [0, 0, 4294967295]}),
        ]
    ),
    "times rounded as Python rounds": doc(
        [
            dict(OP, ts=t, dur=d)
            for t, d in ((0.0005, 0.0015), (0.0025, 2.5e-3), (1e3, 1e-3), (-0.0, 0), (123456789.123456, 7e0))
        ]
        + [dict(OP, ts=4.6e15 - BASE / 1000 - 10, dur=0.1)]
    ),
    "what it skips": doc(
        [
            5,
            "text",
            [1, [2, {"a": None}]],
            None,
            True,
            {"ph": "B", "name": [1, 2], "ts": "late"},
            {"ph": "X", "ts": 1, "x": {"deep": [[[[{"y": -1.5e-7}]]]]}, "args": {"other": {"nested": [True, False]}}},
            {"ph": "X", "ts": 2, "huge": 10**40, "big": 1e300, "z": "SURROGATE kept as text by Python"},
        ]
    ).replace("SURROGATE", "\\ud800"),
    "blank and lines everywhere": ' {\n "traceEvents" :\n [\n {"ph":"X","ts":1}\n ,\r\n\t{ "ph" : "X" , '
    f'"ts" : 2 }} \n] ,"baseTimeNanoseconds":{BASE}\n}}\n',
    "two traceEvents arrays": '{"traceEvents": [{"ph": "X", "ts": 1, "name": "a"}], "traceEvents": '
    f'[{{"ph": "X", "ts": 2, "name": "b"}}, {{"ph": "X", "ts": 3, "name": "a"}}], "baseTimeNanoseconds": {BASE}}}',
    "a BOM": "\ufeff" + doc([OP]),
}


@pytest.mark.parametrize("case", list(TAKEN))
def test_the_scan_reads_what_python_reads(tmp_path, case):
    path = write(tmp_path / "prof.json", TAKEN[case])
    assert_same(scanned(path), in_python(path))


def test_a_trace_of_many_reads_across_the_window(tmp_path):
    """Elements cut off by the 1 MB reads, and more rows than one batch."""
    events = []
    for i in range(80_000):
        events.append(dict(KERNEL, name=f"kernel {i % 97} ✓", ts=i * 3.5, args=dict(KERNEL["args"], correlation=i)))
        events.append(dict(OP, tid=i % 5, ts=i * 3.5 + 0.25))
    path = write(tmp_path / "prof.json", doc(events))
    assert_same(scanned(path), in_python(path))


def test_the_shipped_profiler_trace(tmp_path):
    assert_same(scanned(PROFILER), in_python(PROFILER))


STOPS = {
    "a key twice": doc([dict(OP)]).replace('"ph": "X"', '"ph": "X", "ts": 9'),
    "a lone surrogate in a name": doc([dict(OP, name="x")]).replace('"x"', '"\\ud800"'),
    "NaN": doc([OP]).replace('"dur": 1', '"dur": NaN'),
    "a ts of 20 digits": doc([dict(OP, ts=10**19)]),
    "a negative ts": doc([dict(OP, ts=-1)]),
    "a ts of text": doc([dict(OP, ts="1")]),
    "a bool pid": doc([dict(OP, pid=True)]),
    "a long category": doc([dict(OP, cat="c" * 65)]),
    "a grid of two": doc([dict(KERNEL, args={"grid": [1, 2]})]),
    "a device past 2^31": doc([dict(KERNEL, args={"device": 2**31})]),
    "a control character": doc([dict(OP, name="x")]).replace('"x"', '"\x01"'),
    "a trailing comma": doc([OP]).replace("}]", "},]"),
    "nesting 100 deep": doc([OP]).replace('"ts": 5', '"ts": 5, "x": ' + "[" * 100 + "]" * 100),
    "cut off": doc([OP])[:-60],
}


@pytest.mark.parametrize("case", list(STOPS))
def test_the_scan_leaves_what_it_does_not_take_to_python(tmp_path, case):
    path = tmp_path / "prof.json"
    path.write_bytes(STOPS[case].encode(errors="surrogateescape"))
    with pytest.raises(kineto_scan.ScanStopped):
        scanned(path)
    try:
        expected = in_python(path)
    except HostTraceError as exc:
        with pytest.raises(HostTraceError) as got:
            kineto.load_kineto(path)
        assert str(got.value) == str(exc)
    else:
        assert_same(kineto.load_kineto(path), expected)


AFTER_THE_ARRAY = {
    "a trailing comma": '{"traceEvents": [\n{"ph": "X", "ts": 1, "name": "é"}\n,\n{"ph": "X", "ts": 2}],\n"x": 1,}',
    "extra data": '{"traceEvents": [{"name": "😀", "ph": "X", "ts": 1}],  "baseTimeNanoseconds": 5} x',
    "no base": '{"traceEvents": [{"ph": "X", "ts": 1}]}',
    "a bad member after": '{"x": "ü", "traceEvents": [{"ph": "X", "ts": 1}], "y": [1, 2,]}',
}


def test_a_value_cut_off_by_the_window_says_its_own_place(tmp_path):
    path = write(tmp_path / "prof.json", '{"x": "ü", "traceEvents": [{"ph": "X", "ts": 1}], "y": [1, 2,]}')
    with pytest.raises(HostTraceError, match=r"line 1, column 62: Expecting value \(in member 'y'\)"):
        in_python(path)


@pytest.mark.parametrize("case", list(AFTER_THE_ARRAY))
def test_errors_after_the_array_say_the_same_place(tmp_path, case):
    """And a value cut off by the window's end: its place is where it was (the window
    once dropped the text before it, then counted that text twice)."""
    path = tmp_path / "prof.json"
    path.write_bytes(AFTER_THE_ARRAY[case].encode(errors="surrogateescape"))
    with pytest.raises(HostTraceError) as expected:
        in_python(path)
    with pytest.raises(HostTraceError) as got:
        scanned(path)
    assert str(got.value) == str(expected.value)
