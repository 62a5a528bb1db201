"""nsys_columns.c (the kernel, runtime and NVTX tables read through libsqlite3 in C)
against the Python reading through sqlite3: the same trace where the C read takes the
file, the same one-line error where it leaves it to Python, and the Python reading
where the helper or libsqlite3 is not there."""

import sqlite3

import numpy as np
import pytest

from gpuobs.host_traces import nsys, nsys_columns
from gpuobs.host_traces.trace import HostTraceError

from .test_host_trace_inputs import SQL_CASES, nsys_db

if nsys_columns.library() is None:
    pytest.skip("no C compiler here: only the Python reading runs", allow_module_level=True)
if nsys_columns.Reader.open("file::memory:", 1.0) is None:
    pytest.skip("no libsqlite3.so.0 here: only the Python reading runs", allow_module_level=True)

KERNELS, RUNTIME, NVTX = nsys.KERNELS, nsys.RUNTIME, nsys.NVTX


def load(path, monkeypatch, in_c: bool):
    """(the trace or the error's text, whether the C read gave it)."""
    taken = []
    read_in_c = nsys._read_in_c

    def spy(*args):
        trace = read_in_c(*args)
        taken.append(trace is not None)
        return trace

    with monkeypatch.context() as m:
        m.setattr(nsys, "_read_in_c", spy)
        if not in_c:
            m.setenv("GPUOBS_SQLITE_LIB", "libsqlite3-not-here.so.0")
        try:
            return nsys.load_nsys(path), taken == [True]
        except HostTraceError as exc:
            return str(exc), taken == [True]


def same_trace(a, b) -> None:
    for rows in ("events", "kernels"):
        x, y = getattr(a, rows).rows, getattr(b, rows).rows
        assert x.dtype == y.dtype and len(x) == len(y)
        for field in x.dtype.names:
            assert np.array_equal(x[field], y[field]), (rows, field)
    assert (a.names, a.tracks, a.categories, a.thread_names) == (b.names, b.tracks, b.categories, b.thread_names)


def both(path, monkeypatch):
    """The C reading and the Python one of `path`, checked equal; whether C took it."""
    c, in_c = load(path, monkeypatch, in_c=True)
    python, python_in_c = load(path, monkeypatch, in_c=False)
    assert not python_in_c
    if isinstance(python, str):
        assert c == python
    else:
        same_trace(c, python)
    return c, in_c


def edited(tmp_path, *sql, loose=True):
    path = nsys_db(tmp_path, loose=loose)
    with sqlite3.connect(path) as db:
        for statement in sql:
            db.execute(statement)
    return path


@pytest.mark.parametrize("loose", [False, True], ids=["fixture", "loose"])
def test_the_fixture_is_read_in_c_the_same(tmp_path, monkeypatch, loose):
    trace, in_c = both(nsys_db(tmp_path, loose=loose), monkeypatch)
    assert in_c and len(trace.kernels) > 0 and any(e.category == "nvtx" for e in trace.events)


TAKEN_IN_C = {
    "NULL correlations and names": (
        f"update {KERNELS} set correlationId = NULL, demangledName = NULL where rowid % 3 = 0",
        f"update {RUNTIME} set correlationId = NULL, nameId = NULL where rowid % 2 = 0",
    ),
    "huge stream and thread ids": (
        f"update {KERNELS} set streamId = 9223372036854775807 where rowid = 2",
        f"update {RUNTIME} set globalTid = 9223372036854775807 where rowid = 1",
    ),
    "odd NVTX texts": (
        f"update {NVTX} set text = NULL where rowid % 2 = 0",
        f"update {NVTX} set text = X'6f6ead' where rowid % 3 = 0",  # a BLOB, invalid UTF-8
        f"update {NVTX} set text = 'caf' || char(233) where rowid % 5 = 0",
    ),
    "no runtime, NVTX or thread names": (f"drop table {RUNTIME}", f"drop table {NVTX}", "drop table ThreadNames"),
}


@pytest.mark.parametrize("case", list(TAKEN_IN_C))
def test_odd_but_valid_files_are_read_in_c_the_same(tmp_path, monkeypatch, case):
    trace, in_c = both(edited(tmp_path, *TAKEN_IN_C[case]), monkeypatch)
    assert in_c and not isinstance(trace, str)


LEFT_TO_PYTHON = dict(
    SQL_CASES,
    **{
        "text correlationId": (f"update {KERNELS} set correlationId = 'x' where rowid = 3", "correlationId is text"),
        "runtime end before start": (f"update {RUNTIME} set end = start - 1 where rowid = 2", "row 2: end"),
        "a column missing": (f"alter table {KERNELS} drop column gridZ", "no such column: gridZ"),
    },
)


@pytest.mark.parametrize("case", list(LEFT_TO_PYTHON))
def test_files_the_c_read_leaves_give_the_same_error(tmp_path, monkeypatch, case):
    sql, message = LEFT_TO_PYTHON[case]
    error, _ = both(edited(tmp_path, sql), monkeypatch)
    assert isinstance(error, str) and message in error and "\n" not in error


def test_no_kernel_table_is_the_same_error(tmp_path, monkeypatch):
    error, _ = both(edited(tmp_path, f"drop table {KERNELS}"), monkeypatch)
    assert "no CUPTI_ACTIVITY_KIND_KERNEL" in error


def test_a_slow_column_read_in_c_is_stopped_with_the_same_line(tmp_path, monkeypatch):
    """gridZ a virtual generated column, computed on every read, and a budget the C
    read (only) finds spent: the line Python's own reading gives."""
    path = nsys_db(tmp_path)
    with sqlite3.connect(path) as db:
        columns = [r[1] for r in db.execute(f"pragma table_info({KERNELS})") if r[1] != "gridZ"]
        db.execute(
            f"create table slow ({', '.join(columns)}, "
            "gridZ integer generated always as (length(hex(zeroblob(20000))) * 0 + 1) virtual)"
        )
        db.execute(f"insert into slow ({', '.join(columns)}) select {', '.join(columns)} from {KERNELS}")
        db.execute(f"drop table {KERNELS}")
        db.execute(f"alter table slow rename to {KERNELS}")
    assert load(path, monkeypatch, in_c=True)[1]  # within the budget: read in C
    opened = nsys_columns.Reader.open.__func__
    monkeypatch.setattr(nsys_columns.Reader, "open", classmethod(lambda cls, uri, s: opened(cls, uri, -1.0)))
    with pytest.raises(HostTraceError, match=r"run.sqlite: reading it took over \d+ s, stopped") as caught:
        nsys.load_nsys(path)
    assert "\n" not in str(caught.value)


def test_a_wrong_sqlite_library_falls_back_to_python(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUOBS_SQLITE_LIB", "libsqlite3-not-here.so.0")
    path = nsys_db(tmp_path)
    assert nsys_columns.Reader.open(nsys._uri(path), 10.0) is None
    trace, in_c = load(path, monkeypatch, in_c=True)
    assert not in_c and len(trace.kernels) > 0


def test_no_helper_falls_back_to_python(tmp_path, monkeypatch):
    monkeypatch.setattr(nsys_columns, "library", lambda: None)
    trace, in_c = load(nsys_db(tmp_path), monkeypatch, in_c=True)
    assert not in_c and len(trace.kernels) > 0
