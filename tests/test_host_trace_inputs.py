"""Hostile or broken --host traces (PyTorch-profiler JSON, nsys SQLite): each is a
clear error naming the file and the event or row, never a traceback; anything
but a regular file is refused before it is read; SQLite paths with '#' or '?'
open the file they name. Structured fuzzing of both formats runs them through
`gpuobs export` (hypothesis)."""

import json
import math
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuobs.cli import app
from gpuobs.host_traces.nsys import load_host_trace
from gpuobs.host_traces.trace import HostTraceError
from gpuobs.recording_file import synthetic

from .nsys_fixture import build

EXPORTER = Path(__file__).resolve().parents[1] / "exporter"
PROFILER = Path(__file__).resolve().parents[1] / "examples" / "data" / "side_by_side_profiler.json"
BASE = 1_790_857_026_000_000_000


def kineto(events, base=BASE, **top):
    doc = {"schemaVersion": 1, "traceEvents": events, **top}
    if base is not None:
        doc["baseTimeNanoseconds"] = base
    return doc


def kernel(**over):
    e = {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "pid": 0,
        "tid": 7,
        "ts": 10.5,
        "dur": 2.0,
        "args": {"device": 0, "stream": 7, "correlation": 3, "grid": [4, 1, 1], "block": [128, 1, 1]},
    }
    args = over.pop("args", {})
    e.update(over)
    e["args"].update(args)
    return e


def op(**over):
    e = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 803, "tid": 803, "ts": 5.0, "dur": 1.0}
    e.update(over)
    return e


JSON_CASES = {
    "ts +inf": (
        '{"baseTimeNanoseconds": %d, "traceEvents": [{"ph": "X", "ts": Infinity}]}' % BASE,
        "traceEvents[0]: ts inf us is outside 0 .. 2^62 ns",
    ),
    "ts -inf": (
        '{"baseTimeNanoseconds": %d, "traceEvents": [{"ph": "X", "ts": -Infinity}]}' % BASE,
        "traceEvents[0]: ts -inf us is outside",
    ),
    "ts 1e308": (kineto([op(ts=1e308)]), "traceEvents[0]: ts 1e+308 us is outside"),
    "ts 1e30": (kineto([op(), op(ts=1e30)]), "traceEvents[1]: ts 1e+30 us is outside"),
    "ts past 2116 from its base": (kineto([op(ts=4.62e15 - BASE / 1000)]), "traceEvents[0]: ends at"),
    "negative ts": (kineto([op(ts=-5.0)]), "traceEvents[0]: negative ts -5.0"),
    "negative dur": (kineto([kernel(dur=-1.5)]), "traceEvents[0]: negative dur -1.5"),
    "base 1e40": (
        kineto([op()], base=10**40),
        "baseTimeNanoseconds 10,000,000,000,000,000,000,000,000,000,000,000,000,000 is outside",
    ),
    "negative base": (kineto([op()], base=-5), "baseTimeNanoseconds -5 is outside 0 .. 2^62"),
    "base true": (kineto([op()], base=True), "no integer baseTimeNanoseconds (found bool True)"),
    "no base": (kineto([op()], base=None), "no integer baseTimeNanoseconds (found NoneType None)"),
    "deep nesting": ('{"traceEvents": [' + "[" * 100_000 + "]" * 100_000 + "]}", "nested too deeply"),
    "device of text": (kineto([kernel(args={"device": "zero"})]), "args.device is str 'zero', not a whole number"),
    "grid of text": (kineto([kernel(args={"grid": [1, "a", 3]})]), "args.grid is list [1, 'a', 3], not three"),
    "grid past 2^32": (kineto([kernel(args={"grid": [1, 2**32, 3]})]), "args.grid is list"),
    "correlation of an object": (kineto([kernel(args={"correlation": {}})]), "args.correlation is dict {}"),
    "stream of a list": (kineto([kernel(args={"stream": [7]})]), "args.stream is list [7]"),
    "pid of a list": (kineto([op(pid=[1])]), "traceEvents[0]: pid is list [1], not a whole number or a name"),
    "pid of a float": (kineto([op(pid=1.5)]), "pid is float 1.5"),
    "thread_name of a number": (
        kineto([{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": 5}}]),
        "traceEvents[0]: thread_name args.name is int 5, not a string",
    ),
    "name of a list": (kineto([op(name=["a"])]), "name is list ['a'], not a string"),
    "category too long": (kineto([op(cat="x" * 100)]), "cat is str 'xxxx"),
    "no traceEvents": ({"baseTimeNanoseconds": BASE}, "no traceEvents list"),
    "traceEvents not a list": (
        {"traceEvents": {}, "baseTimeNanoseconds": BASE},
        "expected an array for 'traceEvents', found '{'",
    ),
    "top level a list": ([op()], "expected a JSON object '{', found '['"),
    "broken JSON": ('{"traceEvents": [{"ph": "X", "ts": 1,}]}', "not JSON (line 1, column 38: Expecting property name"),
    "latin-1 text": ('{"traceEvents": [], "x": "caf\xe9"}'.encode("latin-1"), "not UTF-8 text: byte 29 is b'\\xe9'"),
    "binary": (bytes(range(256)) * 4, "not JSON"),
    "empty": (b"", "expected a JSON object '{', found the end of the file"),
}


def write_json(path: Path, doc) -> Path:
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    else:
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


@pytest.mark.parametrize("case", list(JSON_CASES))
def test_hostile_kineto_traces_are_clear_errors(tmp_path, case):
    doc, message = JSON_CASES[case]
    path = write_json(tmp_path / "prof.json", doc)
    with pytest.raises(HostTraceError) as exc:
        load_host_trace(path)
    assert str(exc.value).startswith(f"{path}: ") and message in str(exc.value), str(exc.value)


def test_a_good_kineto_trace_reads_exactly(tmp_path):
    path = write_json(
        tmp_path / "prof.json",
        kineto(
            [
                op(),
                kernel(),
                {"ph": "M", "name": "thread_name", "pid": 803, "tid": 803, "args": {"name": "main"}},
                op(pid="Spans", tid="PyTorch Profiler", ts=0, dur=0),
                {"ph": "i", "ts": 1},
                17,
                kernel(args={"grid": None}),
            ]
        ),
    )
    host = load_host_trace(path)
    assert len(host.events) == 4 and len(host.kernels) == 2 and host.base_ns == BASE
    k = host.kernels[0]
    assert (k.name, k.device, k.stream, k.grid, k.block, k.start_ns, k.dur_ns, k.correlation) == (
        "k",
        0,
        7,
        (4, 1, 1),
        (128, 1, 1),
        BASE + 10_500,
        2_000,
        3,
    )
    assert host.kernels[1].grid == (-1, -1, -1)  # not given: matches no launch
    assert host.events[0].track == ("thread", 803, 803) and host.thread_names == {(803, 803): "main"}
    assert host.events[2].track == ("thread", "Spans", "PyTorch Profiler")


def nsys_db(tmp_path, name="run.sqlite", loose=False) -> Path:
    """The nsys fixture; `loose`: its tables without NOT NULL, as a hostile file may be."""
    out = tmp_path / name
    build(PROFILER, out, ts_normalize=False)
    if loose:
        with sqlite3.connect(out) as db:
            for (table,) in db.execute("select name from sqlite_master where type = 'table'").fetchall():
                db.execute(f"create table loose as select * from {table}")
                db.execute(f"drop table {table}")
                db.execute(f"alter table loose rename to {table}")
    return out


SQL_CASES = {
    "NULL deviceId": (
        "update CUPTI_ACTIVITY_KIND_KERNEL set deviceId = NULL where rowid = 2",
        "CUPTI_ACTIVITY_KIND_KERNEL row 2: deviceId is NULL, expected a whole number",
    ),
    "NULL start": (
        "update CUPTI_ACTIVITY_KIND_RUNTIME set start = NULL where rowid = 3",
        "CUPTI_ACTIVITY_KIND_RUNTIME row 3: start is NULL",
    ),
    "NULL globalTid": (
        "update CUPTI_ACTIVITY_KIND_RUNTIME set globalTid = NULL where rowid = 1",
        "CUPTI_ACTIVITY_KIND_RUNTIME row 1: globalTid is NULL",
    ),
    "text gridX": (
        "update CUPTI_ACTIVITY_KIND_KERNEL set gridX = 'wide' where rowid = 1",
        "row 1: gridX is text 'wide'",
    ),
    "start 2^63-1": (
        "update CUPTI_ACTIVITY_KIND_KERNEL set start = 9223372036854775807 where rowid = 1",
        "row 1: start is int 9223372036854775807, expected a whole number in [0,",
    ),
    "start -2^63": (
        "update CUPTI_ACTIVITY_KIND_KERNEL set start = -9223372036854775808 where rowid = 1",
        "row 1: start is int -9223372036854775808",
    ),
    "REAL start 1e300": (
        "update CUPTI_ACTIVITY_KIND_KERNEL set start = 1e300 where rowid = 1",
        "row 1: start is float 1e+300",
    ),
    "end before start": (
        "update CUPTI_ACTIVITY_KIND_KERNEL set end = start - 1 where rowid = 4",
        "CUPTI_ACTIVITY_KIND_KERNEL row 4: end",
    ),
    "session start as text": (
        "update TARGET_INFO_SESSION_START_TIME set utcEpochNs = 'soon'",
        "TARGET_INFO_SESSION_START_TIME row 1: utcEpochNs is text 'soon'",
    ),
    "no session start": ("delete from TARGET_INFO_SESSION_START_TIME", "session-relative times"),
}


@pytest.mark.parametrize("case", list(SQL_CASES))
def test_hostile_nsys_exports_are_clear_errors(tmp_path, case):
    sql, message = SQL_CASES[case]
    path = nsys_db(tmp_path, loose=True)
    with sqlite3.connect(path) as db:
        db.execute(sql)
    with pytest.raises(HostTraceError) as exc:
        load_host_trace(path)
    assert str(exc.value).startswith(f"{path}: ") and message in str(exc.value), str(exc.value)


def test_blob_and_invalid_utf8_names_are_read_as_text(tmp_path):
    path = nsys_db(tmp_path)
    with sqlite3.connect(path) as db:
        name_id = db.execute("select demangledName from CUPTI_ACTIVITY_KIND_KERNEL where rowid = 1").fetchone()[0]
        db.execute("update StringIds set value = ? where id = ?", (b"blob\xffname", name_id))
    host = load_host_trace(path)
    assert "blob\ufffdname" in host.names


@pytest.mark.parametrize("name", ["run#1.sqlite", "run?x.sqlite", "run%20.sqlite"])
def test_sqlite_paths_are_escaped_in_the_uri(tmp_path, name):
    path = nsys_db(tmp_path, name)
    host = load_host_trace(path)
    assert host.kind == "nsys" and len(host.kernels) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no empty database made beside it


def run_export(tmp_path, host_path, timeout=60):
    rec = synthetic.write_block_trace_recording(tmp_path / "r.gpuobs", n_launches=2, blocks_per_launch=8)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuobs",
            "export",
            str(rec),
            "--host",
            str(host_path),
            "-o",
            str(tmp_path / "t.pftrace"),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=str(EXPORTER)),
    )


def special_file(tmp_path, kind) -> Path:
    if kind == "fifo":
        path = tmp_path / "prof.json"
        os.mkfifo(path)  # opening it for reading would wait for a writer forever
        return path
    if kind == "folder":
        (tmp_path / "dir.json").mkdir()
        return tmp_path / "dir.json"
    return Path("/dev/zero")  # reading it never ends


SPECIAL = {"fifo": "a FIFO (named pipe)", "dev-zero": "a character device", "folder": "a folder"}


@pytest.mark.parametrize("kind", list(SPECIAL))
def test_host_traces_must_be_regular_files(tmp_path, kind):
    """A FIFO blocked forever, /dev/zero grew until the OOM killer came."""
    path = special_file(tmp_path, kind)
    with pytest.raises(HostTraceError, match=re.escape(f"{path}: cannot read: {SPECIAL[kind]}, not a regular file")):
        load_host_trace(path)


@pytest.mark.parametrize("kind", list(SPECIAL))
def test_export_refuses_host_inputs_that_are_not_files(tmp_path, kind):
    proc = run_export(tmp_path, special_file(tmp_path, kind), timeout=30)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr and "Traceback" not in proc.stderr


def test_export_with_a_hostile_host_trace_is_one_clear_line(tmp_path):
    host = write_json(tmp_path / "prof.json", kineto([op(ts=float("inf"))]))
    proc = run_export(tmp_path, host)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "traceEvents[0]: ts inf us is outside" in " ".join(proc.stderr.split())


# -- structured fuzzing through `gpuobs export` -----------------------------------------

ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(-5, 2**33), max_size=4),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
FIELDS = ["ts", "dur", "name", "cat", "pid", "tid", "ph", "args"]
ARGS = ["device", "stream", "correlation", "grid", "block", "name"]


@pytest.fixture(scope="module")
def small_recording(tmp_path_factory):
    return synthetic.write_block_trace_recording(
        tmp_path_factory.mktemp("rec") / "r.gpuobs", n_launches=2, blocks_per_launch=8
    )


def export_in_process(tmp_path, recording, host):
    r = CliRunner().invoke(
        app, ["export", str(recording), "--host", str(host), "-f", "-o", str(tmp_path / "t.pftrace")]
    )
    assert r.exception is None or isinstance(r.exception, SystemExit), (r.output, r.exception)
    assert r.exit_code in (0, 2) and "Traceback" not in r.output, r.output
    return r


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    changes=st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from(FIELDS + ["args." + a for a in ARGS]), ANY), max_size=4
    ),
    base=st.one_of(st.just(BASE), ANY),
)
def test_fuzzed_kineto_traces_export_or_say_why(tmp_path, small_recording, changes, base):
    events = [op(), kernel(), kernel(ts=20.0), op(ph="M", name="thread_name", args={"name": "t"}), op(), kernel()]
    for i, key, value in changes:
        e = events[i]
        if key.startswith("args."):
            if not isinstance(e.get("args"), dict):
                e["args"] = {}
            e["args"][key[5:]] = value
        else:
            e[key] = value
    text = json.dumps(kineto(events, base=base), allow_nan=True)
    export_in_process(tmp_path, small_recording, write_json(tmp_path / "prof.json", text))


CELLS = st.one_of(
    st.none(),
    st.sampled_from([0, 1, -1, 2**31, 2**32, 2**62, 2**63 - 1, -(2**63)]),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=6),
    st.binary(max_size=6),
)
COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": [
        "start",
        "end",
        "deviceId",
        "streamId",
        "correlationId",
        "demangledName",
        "gridX",
        "gridY",
        "gridZ",
        "blockX",
        "blockY",
        "blockZ",
    ],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "globalTid", "correlationId", "nameId"],
    "NVTX_EVENTS": ["start", "end", "eventType", "text", "globalTid", "textId"],
    "StringIds": ["id", "value"],
    "ThreadNames": ["nameId", "globalTid"],
    "TARGET_INFO_SESSION_START_TIME": ["utcEpochNs"],
}


@pytest.fixture(scope="module")
def nsys_original(tmp_path_factory):
    return nsys_db(tmp_path_factory.mktemp("nsys"), loose=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    changes=st.lists(
        st.tuples(st.sampled_from(sorted(COLUMNS)), st.integers(0, 100), st.integers(0, 20), CELLS),
        min_size=1,
        max_size=4,
    )
)
def test_fuzzed_nsys_exports_export_or_say_why(tmp_path, small_recording, nsys_original, changes):
    path = tmp_path / "run.sqlite"
    shutil.copy(nsys_original, path)
    with sqlite3.connect(path) as db:
        for table, column_pick, row_pick, value in changes:
            column = COLUMNS[table][column_pick % len(COLUMNS[table])]
            if isinstance(value, float) and not math.isfinite(value):
                value = None
            rows = [r[0] for r in db.execute(f"select rowid from {table}")]
            if rows:
                db.execute(f"update {table} set {column} = ? where rowid = ?", (value, rows[row_pick % len(rows)]))
    export_in_process(tmp_path, small_recording, path)
