"""Text that came from a file is written and shown safely: a lone surrogate (valid
JSON) in a Kineto trace's names exports instead of crashing (exit 70), a file
name that is not UTF-8 is named with its bytes escaped, and terminal escapes or
bidirectional overrides in a recording's argv, notices or kernel names are shown
as escapes by `info` and `stats`."""

import json
import os

from gpuobs.analysis.kernel_names import short_name
from gpuobs.safe_text import printable, readable

from .cli_helpers import DATA, gpuobs, write_recording

SIDE = DATA / "side_by_side_api_trace.gpuobs"
PROFILER = DATA / "side_by_side_profiler.json"


def test_escapes():
    assert readable("a\ud800b") == "a\\ud800b"
    assert readable(os.fsdecode(b"x\xffy")) == "x\\xffy"
    assert printable("\x1b[2Jk\u202e\x07") == "\\x1b[2Jk\\u202e\\x07"
    assert readable("plain ü") == printable("plain ü") == "plain ü"
    assert short_name("void k\x1b[31m<int>()") == "k\\x1b[31m<int>"


def test_lone_surrogates_in_a_kineto_trace_export(tmp_path):
    doc = json.loads(PROFILER.read_text())
    events = doc["traceEvents"]
    for e in events:
        if e.get("ph") == "X":
            e["name"] = e["name"] + "\ud800"
            e["cat"] = e.get("cat", "") + "\udfff"
            break
    events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": "t\ud800", "args": {"name": "n\ud800"}})
    events.append({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p\udc80"}})
    events.append({"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": "t\ud800", "ts": 1, "dur": 1})
    host = tmp_path / "prof.json"
    host.write_text(json.dumps(doc))  # ensure_ascii: the surrogates are written as \ud800, valid JSON
    r = gpuobs("export", SIDE, "--host", host, "-o", tmp_path / "t.pftrace")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "t.pftrace").stat().st_size > 0


def test_a_host_trace_named_in_bytes_that_are_not_utf8(tmp_path):
    odd = os.fsdecode(b"prof\xff.json")
    (tmp_path / odd).write_bytes(PROFILER.read_bytes())
    r = gpuobs("export", SIDE, "--host", tmp_path / odd, "-o", tmp_path / "t.pftrace")
    assert r.returncode == 0, r.stderr
    r = gpuobs("open", tmp_path / os.fsdecode(b"gone\xff.pftrace"), "--no-browser")
    assert r.returncode == 2 and "gone\\xff.pftrace" in r.stderr, r.stderr


def test_info_and_stats_show_terminal_escapes_as_escapes(tmp_path):
    rec = write_recording(
        tmp_path / "r.gpuobs",
        names=["evil\x1b[2J\u202ekernel", "b", "c"],
        notices=[(1, "notice \x1b]0;title\x07")],
    )
    r = gpuobs("info", rec)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout and "\\x1b]0;title\\x07" in r.stdout
    r = gpuobs("stats", rec)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\u202e" not in r.stdout and "evil\\x1b[2J\\u202ekernel" in r.stdout


def test_an_error_is_one_line_of_bounded_length(tmp_path):
    """A 4,000-digit baseTimeNanoseconds was quoted whole: one 5,300-character line."""
    host = tmp_path / "prof.json"
    host.write_text('{"baseTimeNanoseconds": %s, "traceEvents": []}' % ("9" * 4000))
    r = gpuobs("export", SIDE, "--host", host, "-o", tmp_path / "t.pftrace")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuobs: "), r.stderr
    assert len(lines[0]) <= 1100, len(lines[0])
    assert "baseTimeNanoseconds 9,999,999" in lines[0] and "characters cut ...]" in lines[0]
    assert lines[0].endswith("is outside 0 .. 2^62 ns (1970 to 2116)")  # the end of the message is kept too
    assert not (tmp_path / "t.pftrace").exists()
    from gpuobs.errors import MAX_LINE, one_line

    # one place cuts: a line break in a message (a name from a file) stays on its line
    assert one_line("a\nb\r") == "a\\nb\\r" and one_line("x" * 50, 40).count("cut") == 1
    assert len(one_line("y" * 10**6)) <= MAX_LINE
