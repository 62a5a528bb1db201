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


def load(path, monkeypatch, in_c: bool, threads: int | None = None):
    """(the trace or the error's text, whether the C read gave it); `threads`: the C
    read's threads (default: one per core here)."""
    taken = []
    read_in_c = nsys._read_in_c

    def spy(*args):
        trace = read_in_c(*args)
        taken.append(trace is not None)
        return trace

    with monkeypatch.context() as m:
        m.setattr(nsys, "_read_in_c", spy)
        if threads is not None:
            m.setattr(nsys_columns, "threads", lambda: threads)
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
    """The C reading (its tables on one thread, on three, and one per core here) and
    the Python one of `path`, checked equal; whether C took it (the same each way)."""
    python, python_in_c = load(path, monkeypatch, in_c=False)
    assert not python_in_c
    taken = set()
    for threads in (None, 1, 3):
        c, in_c = load(path, monkeypatch, in_c=True, threads=threads)
        taken.add(in_c)
        if isinstance(python, str):
            assert c == python
        else:
            same_trace(c, python)
    assert len(taken) == 1
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
    "NVTX rows not read, with odd values": (
        # neither a range nor a mark, or no thread: their times and texts are never read
        f"insert into {NVTX} (start, end, eventType, textId, globalTid) values (NULL, 'x', 75, 'y', 1)",
        f"insert into {NVTX} (start, end, eventType, text, globalTid) values (-5, 1e300, 59, X'00ff', NULL)",
        f"insert into {NVTX} (start, end, eventType, globalTid) values (NULL, NULL, NULL, 7)",
    ),
    "an NVTX mark with an end, a range never closed": (
        f"update {NVTX} set eventType = 34, end = start + 5 where rowid = 2",
        f"update {NVTX} set end = NULL where rowid = 3",
    ),
    "names missing from StringIds": (
        f"update {KERNELS} set demangledName = 999999 where rowid = 1",
        f"update {RUNTIME} set nameId = -7 where rowid = 2",
        f"update {NVTX} set textId = 123456, text = NULL where rowid = 4",
        "update ThreadNames set nameId = 888888",
    ),
    "REAL StringIds ids": (  # a column without affinity keeps 2.0 a REAL: Python's dict finds it by 2
        "create table s2 (id, value)",
        "insert into s2 select case when id % 2 = 0 then id + 0.0 else id end, value from StringIds",
        "drop table StringIds",
        "alter table s2 rename to StringIds",
    ),
    "no textId column": (f"alter table {NVTX} drop column textId",),
    "a name and thread per row, equal names of other ids": (
        f"update {KERNELS} set demangledName = rowid + 1000000, streamId = rowid",
        f"update {RUNTIME} set nameId = rowid + 1000000, globalTid = rowid % 5 + (rowid % 3) * (1 << 48)",
        f"update {NVTX} set globalTid = rowid, text = 'string#' || (rowid + 1000000) where rowid % 2 = 0",
        "insert into StringIds values (1000001, 'string#1000002')",  # a text equal to a missing id's name
        "insert into StringIds values (1000003, 'kernel')",  # equal to a category
        "insert into StringIds values (1000004, '')",  # equal to a NULL name's
        "insert into StringIds values (1000005, 'string#1000002')",
    ),
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
        "text eventType in an NVTX row not read": (
            f"insert into {NVTX} (start, eventType, globalTid) values (1, 'range', 5)",
            "eventType is text 'range'",
        ),
        "negative globalTid in an NVTX row not read": (
            f"insert into {NVTX} (start, eventType, globalTid) values (1, 75, -1)",
            "globalTid is int -1",
        ),
        "text textId in an NVTX range": (f"update {NVTX} set textId = 'x' where rowid = 3", "textId is text 'x'"),
        "NVTX end before start": (f"update {NVTX} set end = start - 1 where rowid = 5", "row 5: end"),
        "NVTX mark end past 2^62 on REALTIME": (
            f"update {NVTX} set eventType = 34, end = 4611686018427387903 where rowid = 6",
            "row 6: end is int 4611686018427387903",
        ),
        "runtime end past 2^62 on REALTIME": (
            f"update {RUNTIME} set end = 4611686018427387903 where rowid = 7",
            "row 7: end is int 4611686018427387903",
        ),
        "REAL runtime correlationId": (
            f"update {RUNTIME} set correlationId = 2.5 where rowid = 8",
            "correlationId is float 2.5",
        ),
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


@pytest.mark.parametrize(
    "sql",
    [
        f"create index by_type on {NVTX} (eventType, globalTid)",
        f"create index by_start on {KERNELS} (start desc, end, deviceId, streamId, correlationId, demangledName, "
        "gridX, gridY, gridZ, blockX, blockY, blockZ)",
        f"create index by_thread on {RUNTIME} (globalTid desc, start, end, nameId)",
    ],
    ids=["NVTX by type", "kernels covered", "runtime covered"],
)
def test_an_index_leaves_the_file_to_python(tmp_path, monkeypatch, sql):
    """The Python reading's rows come in the index's order where its query uses one:
    the C read, which scans each table whole, leaves such a file to it."""
    path = edited(tmp_path, sql)
    with sqlite3.connect(path) as db:
        plans = [
            row[3]
            for query in (nsys._kernel_query("demangledName"), nsys.RUNTIME_QUERY, nsys._nvtx_query("textId"))
            for row in db.execute(f"explain query plan {query}")
        ]
    assert any("INDEX" in p for p in plans)
    trace, in_c = both(path, monkeypatch)
    assert not in_c and not isinstance(trace, str)


def test_a_string_id_twice_leaves_the_file_to_python(tmp_path, monkeypatch):
    """Which of two StringIds rows of one id the Python reading keeps is its query's
    order: the C read leaves such a file to it."""
    path = edited(
        tmp_path,
        "create table s2 as select * from StringIds",
        "drop table StringIds",
        "alter table s2 rename to StringIds",
        f"insert into StringIds select demangledName, 'another name' from {KERNELS} where rowid = 1",
    )
    trace, in_c = both(path, monkeypatch)
    assert not in_c and not isinstance(trace, str)


def test_the_threads_read_every_table_alike(tmp_path):
    """The same jobs on one thread and on several: the same columns, keys, texts and bounds."""
    path = nsys_db(tmp_path)
    results = []
    for threads in (1, 2, 4):
        reader = nsys_columns.Reader.open(nsys._uri(path), 60.0)
        C, Key = nsys_columns.Column, nsys_columns.Key
        whole, nullable = C(*nsys.I64), C(*nsys.I64, nullable=True, null_value=-9)
        jobs = [
            reader.add(
                f"select start, end, streamId, demangledName from {KERNELS}",
                [whole] * 3 + [nullable],
                keys=(Key(3), Key(2, 0)),
            ),
            reader.add(f"select start, end, globalTid from {RUNTIME}", [whole] * 3, keys=(Key(2),)),
            reader.add(
                f"select eventType, globalTid, start, end, textId, cast(text as text) from {NVTX}",
                [nullable, nullable, whole, nullable, nullable, nsys_columns.TEXT],
                keys=(Key(4),),
                mode=nsys_columns.NVTX,
                ordered=(2, 3),
            ),
        ]
        reader.run(threads)
        out = []
        for job in jobs:
            rows = np.empty(job.rows, [("a", "<i8"), ("b", "<i8")])
            job.fill_rows(rows, {"a": 0, "b": (1, 0)})
            out.append(
                (
                    job.rows,
                    rows.tobytes(),
                    [job.keys(k).tobytes() for k in range(job.n_keys)],
                    job.texts(),
                    [b.tobytes() for b in job.bounds()],
                )
            )
        results.append(out)
    assert results[0] == results[1] == results[2]
    assert all(rows > 0 for rows, *_ in results[0])


def test_a_check_failing_on_one_thread_stops_the_others(tmp_path):
    path = edited(tmp_path, f"update {RUNTIME} set start = 'x' where rowid = 1")
    reader = nsys_columns.Reader.open(nsys._uri(path), 60.0)
    whole = nsys_columns.Column(*nsys.I64)
    reader.add(f"select start from {KERNELS}", [whole])
    reader.add(f"select start from {RUNTIME}", [whole])
    with pytest.raises(nsys_columns.ReadStopped):
        reader.run(2)


BIG = (1 << 63) - 1
KEY_ORDERS = {
    "rising": [(i, i % 2) for i in range(3000)],
    "rising, then old keys again": [(i, 0) for i in range(2000)] + [(i * 7 % 2000, 0) for i in range(1500)],
    "rising, then a new key out of order": [(2 * i, 0) for i in range(2000)] + [(1, 0), (3, 0), (2, 0), (5000, 0)],
    "rising, then more old keys than keys": [(i, 0) for i in range(50)] + [(i * 13 % 50, 0) for i in range(400)],
    "rising in b under one a": [(5, i) for i in range(1500)] + [(5, 3), (4, 9), (5, 1499), (5, 1500)],
    "extremes": [(-BIG - 1, 0), (-1, 1), (0, 0), (BIG, 0), (BIG, 1), (-BIG - 1, 0), (BIG, 1), (0, 1)],
    "falling": [(3000 - i, 0) for i in range(3000)] + [(2999, 0), (1, 0)],
    "random": [(int(x), int(y)) for x, y in np.random.default_rng(5).integers(-40, 40, (4000, 2))],
}


@pytest.mark.parametrize("order", list(KEY_ORDERS))
def test_keys_are_numbered_in_first_seen_order(tmp_path, order):
    """nsys_columns.c's key sets, sorted while keys rise and hashed after: each row's key's
    number and the distinct keys in first-seen order, as a dict gives them."""
    keys = KEY_ORDERS[order]
    path = tmp_path / "keys.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("create table t (a, b)")
        db.executemany("insert into t values (?, ?)", keys)
    reader = nsys_columns.Reader.open(nsys._uri(path), 60.0)
    whole = nsys_columns.Column(*nsys.I64)
    job = reader.add("select a, b from t", [whole, whole], keys=(nsys_columns.Key(0, 1), nsys_columns.Key(0)))
    reader.run(1)
    rows = np.empty(job.rows, [("pair", "<i8"), ("a", "<i8")])
    job.fill_rows(rows, {"pair": 2, "a": 3})
    for k, (column, of) in enumerate((("pair", keys), ("a", [(a, 0) for a, _ in keys]))):
        numbers: dict = {}
        expected = [numbers.setdefault(key, len(numbers)) for key in of]
        assert rows[column].tolist() == expected, (order, column)
        assert [tuple(key) for key in job.keys(k).tolist()] == list(numbers), (order, column)


PER_ROW_NAMES = (
    f"update {KERNELS} set demangledName = rowid + 1000000",
    f"update {RUNTIME} set nameId = rowid + 2000000",
    "insert into StringIds values (1000003, 'kernel three'), (2000005, 'runtime five'), (2000007, '')",
)
REBUILT_STRING_IDS = (
    "create table s2 ({id}, value)",
    "insert into s2 select {value}, value from StringIds",
    "drop table StringIds",
    "alter table s2 rename to StringIds",
)
WHOLE_STRING_IDS = {  # (edits, whether the ids are looked up in SQL, whether C keeps the file, names found)
    "integer ids": ((), False, True, True),
    "REAL ids": (tuple(s.format(id="id", value="id + 0.0") for s in REBUILT_STRING_IDS), True, True, True),
    "text ids, TEXT affinity": (  # '1000003' is not 1000003 to either reading
        tuple(s.format(id="id text", value="id") for s in REBUILT_STRING_IDS),
        True,
        True,
        False,
    ),
    "an id twice": (
        (*(s.format(id="id", value="id") for s in REBUILT_STRING_IDS), "insert into StringIds values (1000003, 'x')"),
        False,
        False,
        False,
    ),
}


@pytest.mark.parametrize("case", list(WHOLE_STRING_IDS))
def test_string_ids_read_whole_where_names_are_many(tmp_path, monkeypatch, case):
    """A name per row: more ids than StringIds rows, so the table is read whole and kept
    by id in Python where every id is an integer, else looked up in SQL as before;
    the trace the Python reading's either way, an id twice left to it."""
    edits, in_sql, kept, named = WHOLE_STRING_IDS[case]
    path = edited(tmp_path, *PER_ROW_NAMES, *edits)
    looked_up = []
    dumps = nsys.json.dumps
    monkeypatch.setattr(nsys.json, "dumps", lambda ids: looked_up.append(len(ids)) or dumps(ids))
    trace, in_c = both(path, monkeypatch)
    assert in_c == kept and not isinstance(trace, str)
    assert bool(looked_up) == in_sql
    names = {"kernel three", "runtime five", "string#1000001", "string#2000002"}
    assert (names <= set(trace.names)) == named
    assert not named or "string#1000003" not in trace.names


def _kernel_job(path):
    reader = nsys_columns.Reader.open(nsys._uri(path), 60.0)
    whole = nsys_columns.Column(*nsys.I64)
    job = reader.add(
        f"select start, end, streamId, demangledName from {KERNELS}", [whole] * 4, keys=(nsys_columns.Key(3),)
    )
    return reader, job


def test_sunk_columns_are_the_kept_ones(tmp_path):
    """Columns written by C straight into numpy rows (int64 and int32 fields, an array
    field's item, a difference): what fill_rows gives from the kept columns."""
    path = nsys_db(tmp_path)
    reader, job = _kernel_job(path)
    reader.run(1)
    kept = np.empty(job.rows, [("a", "<i8"), ("b", "<i8"), ("c", "<i8"), ("k", "<i8")])
    job.fill_rows(kept, {"a": 0, "b": (1, 0), "c": 2, "k": 4})
    layout = [("pad", "<i4"), ("a", "<i8"), ("dur", "<i4"), ("pair", "<i8", (2,)), ("k", "<i4")]
    reader, job = _kernel_job(path)
    sunk = np.zeros(len(kept) + 3, layout)  # room to spare: the rows read are written, no more
    job.sink(sunk, {"a": 0, "dur": (1, 0), ("pair", 1): 2, "k": 4})
    reader.run(1)
    assert job.rows == len(kept) > 0
    assert sunk["a"][: job.rows].tolist() == kept["a"].tolist()
    assert sunk["dur"][: job.rows].tolist() == kept["b"].tolist()
    assert sunk["pair"][: job.rows, 1].tolist() == kept["c"].tolist()
    assert sunk["k"][: job.rows].tolist() == kept["k"].tolist()
    assert not sunk["pad"].any() and not sunk["pair"][:, 0].any() and not sunk[job.rows :]["a"].any()
    with pytest.raises(nsys_columns.ReadStopped):  # a sunk column is not kept in C
        job.fill_rows(np.empty(job.rows, [("a", "<i8")]), {"a": 0})
    job.fill_rows(np.empty(job.rows, [("x", "<i8")]), {"x": 3})  # one not sunk is


@pytest.mark.parametrize("case", ["more rows than room", "past an int32", "no room at all"])
def test_a_sink_that_cannot_take_the_rows_stops_the_read(tmp_path, case):
    path = edited(tmp_path, f"update {KERNELS} set streamId = 4294967296 where rowid = 7")
    reader, job = _kernel_job(path)
    with sqlite3.connect(path) as db:
        count = db.execute(f"select count(*) from {KERNELS}").fetchone()[0]
    rows = np.empty(
        {"more rows than room": count - 1, "past an int32": count, "no room at all": 0}[case], [("v", "<i4")]
    )
    job.sink(rows, {"v": 2 if case == "past an int32" else 0})
    with pytest.raises(nsys_columns.ReadStopped):
        reader.run(1)


def test_sinks_refuse_what_c_cannot_write(tmp_path):
    reader, job = _kernel_job(nsys_db(tmp_path))
    with pytest.raises(TypeError):
        job.sink(np.empty(4, [("f", "<f8")]), {"f": 0})
    with pytest.raises(TypeError):
        job.sink(np.empty(4, [("g", "<i8", (2,))]), {("g", 2): 0})
    with pytest.raises(nsys_columns.ReadStopped):  # a column the job does not keep
        job.sink(np.empty(4, [("v", "<i8")]), {"v": 9})
    rows = np.empty(4, [("v", "<i8")])
    rows.flags.writeable = False
    with pytest.raises(nsys_columns.ReadStopped):
        job.sink(rows, {"v": 0})


class _Miscounted:
    """A connection whose count(*) of one table is off by `by` (as if the file changed
    between the count and the C read): everything else passed through."""

    def __init__(self, db, table, by):
        self._db, self._table, self._by = db, table, by

    def __getattr__(self, name):
        return getattr(self._db, name)

    def execute(self, sql, *args):
        if sql == f"select count(*) from {self._table}":
            (count,) = self._db.execute(sql).fetchone()
            return self._db.execute("select ?", (count + self._by,))
        return self._db.execute(sql, *args)


@pytest.mark.parametrize("table", [KERNELS, RUNTIME, NVTX])
@pytest.mark.parametrize("by", [-1, 1])
def test_rows_not_the_rows_counted_leave_the_file_to_python(tmp_path, monkeypatch, table, by):
    """The C read writes into rows sized by count(*): a table with more rows than counted
    stops it (no row past the end), one with fewer (kernels, runtime) too, NVTX's fewer
    being its rows not read; the Python reading then gives the trace."""
    path = nsys_db(tmp_path)
    python, _ = load(path, monkeypatch, in_c=False)
    opened = nsys.open_read_only
    monkeypatch.setattr(nsys, "open_read_only", lambda p: _Miscounted(opened(p), table, by))
    trace, in_c = load(path, monkeypatch, in_c=True)
    assert in_c == (table == NVTX and by == 1)
    same_trace(trace, python)


def _remapped_by_numpy(rows, names, tracks, texts_base, category):
    """The numpy remap nsys._read_c made before nsys_remap: three gathers and a where."""
    rows = rows.copy()
    name = names[rows["name"]]
    if texts_base >= 0:
        name = np.where(rows["category"] >= 0, texts_base + np.maximum(rows["category"], 0), name)
    rows["name"], rows["track"], rows["category"] = name, tracks[rows["track"]], category
    return rows


@pytest.mark.parametrize("seed", range(8))
def test_remap_is_the_numpy_gathers(seed):
    from gpuobs.host_traces.trace import EVENT

    rng = np.random.default_rng(seed)
    n, n_names, n_tracks = int(rng.integers(0, 300)), int(rng.integers(1, 50)), int(rng.integers(1, 50))
    rows = np.zeros(n, EVENT)
    rows["start_ns"], rows["dur_ns"] = rng.integers(0, 10**12, n), rng.integers(0, 10**6, n)
    rows["name"], rows["track"] = rng.integers(0, n_names, n), rng.integers(0, n_tracks, n)
    rows["category"] = np.where(rng.random(n) < 0.3, rng.integers(0, 20, n), -1)  # NVTX's own text, or none
    names = rng.integers(0, 10**6, n_names).astype(np.int32)
    tracks = rng.integers(0, 10**6, n_tracks).astype(np.int32)
    for texts_base in (-1, int(rng.integers(0, 10**6))):
        want = _remapped_by_numpy(rows, names, tracks, texts_base, seed % 3)
        got = rows.copy()
        nsys_columns.remap(got, names, tracks, texts_base, seed % 3)
        assert got.tobytes() == want.tobytes()


def test_remap_stops_at_a_code_out_of_range():
    from gpuobs.host_traces.trace import EVENT

    names, tracks = np.array([5, 6], np.int32), np.array([7], np.int32)
    for name, track, text, base in (
        (2, 0, -1, -1),
        (-1, 0, -1, -1),
        (0, 1, -1, -1),
        (0, -1, -1, -1),
        (0, 0, 1, 2**31 - 1),
    ):
        rows = np.zeros(1, EVENT)
        rows["name"], rows["track"], rows["category"] = name, track, text
        with pytest.raises(nsys_columns.ReadStopped):
            nsys_columns.remap(rows, names, tracks, base, 0)
    with pytest.raises(nsys_columns.ReadStopped):  # not EVENT's int32 fields
        nsys_columns.remap(np.zeros(1, [("track", "<i8"), ("name", "<i4"), ("category", "<i4")]), names, tracks, -1, 0)


def test_the_counts_come_from_a_thread_of_their_own_and_stop_as_the_read_does(tmp_path, monkeypatch):
    """The tables' rows are counted beside the checks (another thread, its own connection);
    a count past the budget stops the load with the budget's line, any other error there
    leaves the file to the Python reading (the same trace)."""
    import threading

    path = nsys_db(tmp_path)
    want, in_c = load(path, monkeypatch, in_c=True)
    assert in_c
    counted_on, counted = [], nsys._counted

    def spy(*args):
        counted_on.append(threading.get_ident())
        return counted(*args)

    monkeypatch.setattr(nsys, "_counted", spy)
    got, in_c = load(path, monkeypatch, in_c=True)
    assert in_c and counted_on and threading.get_ident() not in counted_on
    assert got.events.rows.tobytes() == want.events.rows.tobytes()

    def interrupted(*args):
        raise sqlite3.OperationalError("interrupted")

    monkeypatch.setattr(nsys, "_counted", interrupted)
    with pytest.raises(HostTraceError, match=r"run.sqlite: reading it took over \d+ s, stopped"):
        nsys.load_nsys(path)

    def broken(*args):
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(nsys, "_counted", broken)
    got, in_c = load(path, monkeypatch, in_c=True)
    assert not in_c and got.events.rows.tobytes() == want.events.rows.tobytes()
