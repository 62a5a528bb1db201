"""The gpuobs command as a user runs it (a subprocess): one naming convention, help
and version, clear one-line errors and never a traceback, text that is not cut or
wrapped when piped, and user text printed as it is."""

import json
import os
import re
import shutil

import pytest

from gpuobs.recording_file import schema

from .cli_helpers import DATA, copy_as_process, gpuobs, write_recording

BLOCK = DATA / "decode_block_trace.gpuobs"
MEM = DATA / "decode_mem_sampled.gpuobs"
PROFILER = DATA / "side_by_side_profiler.json"


def no_traceback(r):
    assert "Traceback" not in r.stdout + r.stderr, r.stderr
    return r


def test_recordings_are_positional_and_outputs_are_dash_o(tmp_path):
    out = tmp_path / "t.pftrace"
    r = no_traceback(gpuobs("export", BLOCK, "-o", out))
    assert r.returncode == 0 and out.stat().st_size > 1_000_000 and r.stderr == ""
    # several recordings where that makes sense: export merges, info and stats read each
    two = tmp_path / "two.pftrace"
    assert gpuobs("export", BLOCK, MEM, "-o", two).returncode == 0
    r = gpuobs("info", BLOCK, MEM, "--json")
    assert [d["mode"] for d in json.loads(r.stdout)] == ["block_trace", "mem_sampled"]
    r = gpuobs("stats", BLOCK, MEM, "--format", "json")
    assert [d["mode"] for d in json.loads(r.stdout)] == ["block_trace", "mem_sampled"]


def test_the_default_output_is_named_after_the_recording_in_the_current_folder(tmp_path):
    shutil.copy(BLOCK, tmp_path / "gpuobs.gpuobs")
    copy_as_process(BLOCK, tmp_path / "gpuobs.777.gpuobs", 777)  # a child process's recording
    (tmp_path / "gpuobs.old.gpuobs").write_bytes(b"not a child: ignored")
    (tmp_path / "gpuobs.9.gpuobs").write_bytes(b"not a recording: ignored")
    r = gpuobs("export", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "gpuobs.pftrace").is_file() and "57,324 block slices" in r.stdout  # both recordings


def test_a_trimmed_copy_named_like_a_child_is_not_taken_for_one(tmp_path):
    """`gpuobs.2.gpuobs` cut from gpuobs.gpuobs holds the run's pid, not 2: it was counted
    twice (57,324 slices for 28,662 blocks); a child holds the pid in its name."""
    shutil.copy(BLOCK, tmp_path / "gpuobs.gpuobs")
    r = gpuobs("trim", "gpuobs.gpuobs", "--flushes", "0:", "-o", "gpuobs.2.gpuobs", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    pid = json.loads(gpuobs("info", BLOCK, "--json").stdout)["pid"]
    copy_as_process(BLOCK, tmp_path / f"gpuobs.{pid}.gpuobs", pid)  # the run's own pid: a copy too
    r = gpuobs("export", "-f", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "28,662 block slices" in r.stdout, r.stdout
    r = gpuobs("info", "--json", cwd=tmp_path)
    assert json.loads(r.stdout)["recording"] == "gpuobs.gpuobs", r.stdout  # one recording: an object, not a list


def test_old_spellings_still_work_with_a_deprecation_line(tmp_path):
    shutil.copy(BLOCK, tmp_path / "gpuobs.gpuobs")
    r = gpuobs("export", "-i", BLOCK, "a.pftrace", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "a.pftrace").is_file()
    assert "gpuobs: warning: `gpuobs export -i REC OUT` is deprecated" in r.stderr
    r = gpuobs("export", "b.pftrace", cwd=tmp_path)  # the output positional, the default recording read
    assert r.returncode == 0 and (tmp_path / "b.pftrace").is_file() and "is deprecated" in r.stderr
    r = gpuobs("trim", "gpuobs.gpuobs", "part.gpuobs", "--flushes", "0:1", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "part.gpuobs").is_file()
    assert "`gpuobs trim IN OUT` is deprecated" in r.stderr


def test_every_writer_refuses_an_existing_output_without_force(tmp_path):
    pytest.importorskip("matplotlib")
    for args in (["export", BLOCK, "-o"], ["trim", BLOCK, "--flushes", "0:1", "-o"], ["plot", BLOCK, "-o"]):
        out = tmp_path / ("x" + {"export": ".pftrace", "trim": ".gpuobs", "plot": ".png"}[args[0]])
        out.write_bytes(b"precious")
        r = no_traceback(gpuobs(*args, out))
        assert r.returncode == 2 and f"{out} exists; pass -f/--force to replace it" in r.stderr
        assert out.read_bytes() == b"precious"
        r = gpuobs(*args, out, "-f")
        assert r.returncode == 0, r.stderr
        assert out.read_bytes() != b"precious"


def test_help_and_version_follow_the_usual_conventions():
    r = gpuobs("-h")
    assert r.returncode == 0 and "Commands:" in r.stdout and "open" in r.stdout
    assert gpuobs("--version").stdout.strip() == gpuobs("version").stdout.strip() != ""
    for command in ("record", "info", "stats", "export", "open", "plot", "trim", "build"):
        text = gpuobs(command, "-h").stdout
        assert "<bool>" not in text and "<list[" not in text and "{" not in text.split("Options:")[0], text
        for line in text.splitlines():
            if line.strip().startswith(("--json", "--salvage")):
                assert len(line.split()) > 1, f"{command}: {line!r} has no help text"
    assert "Usage: python -m gpuobs record [OPTIONS] -- CMD [ARGS]..." in gpuobs("record", "-h").stdout


def test_a_missing_program_is_answered_as_a_shell_would(tmp_path):
    r = no_traceback(gpuobs("record", "-o", tmp_path / "r.gpuobs", "--", "gpuobs-no-such-program", cwd=tmp_path))
    assert r.returncode == 127 and r.stderr.strip() == "gpuobs: gpuobs-no-such-program: command not found"
    (tmp_path / "notexec").write_text("x")
    r = gpuobs("record", "--", "./notexec", cwd=tmp_path)
    assert r.returncode == 126 and "gpuobs: ./notexec: permission denied" in r.stderr


def test_inputs_that_are_not_recordings_get_one_clear_line(tmp_path):
    r = no_traceback(gpuobs("info", PROFILER))
    assert r.returncode == 2 and "is not a gpuobs recording (it looks like JSON" in r.stderr
    assert "--salvage" not in r.stderr
    r = no_traceback(gpuobs("info", tmp_path / "missing.gpuobs"))
    assert r.returncode == 2 and "no recording at" in r.stderr and "--salvage" not in r.stderr
    for command in (
        ["info"],
        ["stats"],
        ["export", "-o", tmp_path / "x.pftrace"],
        ["plot", "-o", tmp_path / "x.png"],
        ["trim", "--flushes", "0:1", "-o", tmp_path / "x.gpuobs"],
    ):
        r = no_traceback(gpuobs(command[0], DATA, *command[1:]))
        assert r.returncode == 2 and f"cannot read {DATA}: a folder, not a regular file" in r.stderr
    damaged = tmp_path / "d.gpuobs"
    damaged.write_bytes(BLOCK.read_bytes()[:-100])
    r = gpuobs("info", damaged)
    assert r.returncode == 2 and "--salvage keeps every complete chunk" in r.stderr
    assert gpuobs("info", damaged, "--salvage").returncode == 0


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`gpuobs info --json | head`: output far beyond a pipe's buffer, the reader gone."""
    import subprocess

    from gpuobs.recording_file.recording_writer import RecordingWriter

    from .cli_helpers import gpuobs_cmd, repo_env

    many = tmp_path / "many.gpuobs"
    with RecordingWriter(many) as w:
        w.run(pid=1, mode=schema.Mode.BLOCK_COUNTER)
        for seq in range(4000):
            w.flush(flush_seq=seq, attempted=0, recorded=0, dropped=0)
    proc = subprocess.run(
        " ".join(gpuobs_cmd("info", str(many), "--json")) + " | head -c 10",
        shell=True,
        env=repo_env(),
        capture_output=True,
        text=True,
    )
    assert proc.stdout == '{\n  "recor' and proc.stderr == ""


def test_piped_output_never_wraps(tmp_path):
    r = gpuobs("export", MEM, "-o", tmp_path / "m.pftrace", COLUMNS="60")
    gpu_line = [line for line in r.stdout.splitlines() if "GPU 0" in line]
    assert len(gpu_line) == 1 and "34,737,899 accesses counted" in gpu_line[0] and "clock: measured" in gpu_line[0]
    r = gpuobs("info", BLOCK)  # piped, no COLUMNS: one line per value, for grep
    assert any(
        len(line) > 100 and "unmatched exits" in line and line.endswith("move a block's end")
        for line in r.stdout.splitlines()
    )


def test_help_is_laid_out_to_the_terminal_width():
    wide = gpuobs("stats", "-h", COLUMNS="140").stdout.splitlines()
    narrow = gpuobs("stats", "-h", COLUMNS="70").stdout.splitlines()
    assert max(map(len, wide)) > 100 and max(map(len, narrow)) <= 70 and len(narrow) > len(wide)


@pytest.mark.parametrize("columns", [80, 60, 44])
def test_info_keeps_its_two_columns_at_any_width(columns):
    """COLUMNS (piped or not): a long value wraps under itself, never to column 0."""
    lines = gpuobs("info", BLOCK, COLUMNS=str(columns)).stdout.splitlines()
    assert max(len(line) for line in lines[1:]) <= columns  # the first, the recording's path, is not broken
    at = next(i for i, line in enumerate(lines) if line.startswith("  unmatched exits"))
    assert lines[at + 1].startswith(" " * 18) and lines[at + 1][18] != " "
    assert all(line.startswith("  ") for line in lines[1:])


@pytest.mark.parametrize("columns", [34, 24])
def test_info_too_narrow_for_two_columns_puts_each_value_under_its_key(columns):
    """Below twice the key column a value cannot start at column 18: a line that does not
    fit becomes its key alone, then its value indented under it, never back to column 2."""
    wide = gpuobs("info", BLOCK).stdout.splitlines()
    keys = {line[2:17].strip() for line in wide[1:] if line[2:3] not in ("", " ")}
    lines = gpuobs("info", BLOCK, COLUMNS=str(columns)).stdout.splitlines()
    for i, line in enumerate(lines[1:], 1):
        assert len(line) <= columns or " " not in line.strip(), line  # only a word longer than the width
        if line[2:3] != " ":  # a key: alone, or with its value where the whole line fits
            assert line.strip() in keys or (line[2:17].strip() in keys and line[18] != " "), line
            if line.strip() in keys:
                assert lines[i + 1].startswith(" " * 6), lines[i + 1]
    assert {line.strip() for line in lines} >= {"recorded by", "unmatched exits", "flush windows"}


def test_user_text_is_printed_as_it_is(tmp_path):
    rec = write_recording(tmp_path / "r.gpuobs", names=["kern[bold]el[/bold]<int>()", "b[red]x()", "c()"])
    r = gpuobs("stats", rec, "--report", "kernels")
    assert "kern[bold]el[/bold]<int>" in r.stdout and "b[red]x" in r.stdout
    r = gpuobs("export", rec, "-o", tmp_path / "[bold]x[red].pftrace")
    assert "[bold]x[red].pftrace: " in r.stdout


def test_the_plot_hint_keeps_its_extra_name(tmp_path):
    shim = tmp_path / "shim" / "matplotlib"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    env_path = f"{tmp_path / 'shim'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    from .cli_helpers import repo_env

    env = repo_env()
    env["PYTHONPATH"] = f"{tmp_path / 'shim'}{os.pathsep}{env['PYTHONPATH']}"
    assert env_path  # the shim comes first
    r = gpuobs("plot", BLOCK, "-o", tmp_path / "p.png", env=env)
    assert r.returncode == 2 and "pip install 'gpuobs[plot]'" in r.stderr


def test_plot_writes_images_and_says_what_it_cannot_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.png"
    r = gpuobs("plot", BLOCK, "-o", out)
    assert r.returncode == 0 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    assert gpuobs("plot", BLOCK, "-o", tmp_path / "p.svg").returncode == 0
    r = no_traceback(gpuobs("plot", BLOCK, "-o", tmp_path / "x.txt"))
    assert r.returncode == 2 and "name it .png, .svg or .pdf" in r.stderr
    r = no_traceback(gpuobs("plot", MEM, "-o", tmp_path / "m.png"))
    assert r.returncode == 2 and "holds no block records to plot (mode mem_sampled" in r.stderr
    r = gpuobs("plot", BLOCK, cwd=tmp_path)  # no -o: named after the recording, as export names its trace
    assert r.returncode == 0 and (tmp_path / "decode_block_trace.png").stat().st_size > 20_000, r.stderr


def test_the_occupancy_grid_holds_every_block_nanosecond(block_recording):
    import gpuobs as g
    from gpuobs.analysis.plot import occupancy

    grid, _t0, width = occupancy(g.load(block_recording), 0)
    ev = g.load(block_recording).events
    busy = (ev["time_end"].astype("int64") - ev["time_start"].astype("int64")).sum()
    assert abs(grid.sum() * width - busy) / busy < 1e-6


def test_info_is_a_readable_summary():
    r = gpuobs("info", BLOCK)
    text = r.stdout
    for expected in (
        "recorded by     gpuobs-tool 0.1.0, pid 609",
        "command         python3 examples/decode_graph.py",
        "GPU 0           NVIDIA H200, 132 SMs, compute capability 9.0",
        "ran 4.172 s",
        "device span     0..87.123 ms",
        "complete        yes",
        "unmatched exits 2,080 threads whose exit",
        "flush windows   6",
    ):
        assert expected in text, expected
    assert "True" not in text
    d = json.loads(gpuobs("info", BLOCK, "--json").stdout)
    assert d["complete"] is True and d["gpus"][0]["name"] == "NVIDIA H200" and d["device_span_ns"] == 87_122_752
    assert [w["index"] for w in d["flush_windows"]] == list(range(6)) and d["blocks_recorded"] == 28_662


def test_info_says_what_belongs_to_no_launch(tmp_path):
    """Records whose grid id matches no listed launch, and counts in slots no launch
    owned, are named with their number (never silently left out)."""
    from gpuobs.recording_file import synthetic
    from gpuobs.recording_file.recording_writer import RecordingWriter

    ev, launches = synthetic.block_trace_events(2, 50, sm_count=8)
    ev["grid_id"][ev["grid_id"] == launches["grid_id"][1]] = 999_999  # a grid the tool never listed
    path = tmp_path / "n.gpuobs"
    with RecordingWriter(path) as w:
        w.run(mode=schema.Mode.BLOCK_TRACE)
        w.launches(launches)
        w.flush(attempted=100, recorded=100, dropped=0, unattributed=50)
        w.events(ev)
        w.end()
    text = gpuobs("info", path).stdout
    assert "no launch       50 records and 50 counted blocks belong to no listed launch" in text, text
    assert json.loads(gpuobs("info", path, "--json").stdout)["events_unattributed"] == 50


def test_info_says_when_two_windows_share_a_number(tmp_path):
    """A tool before 2026-12-07 numbered flush windows per context: after a device reset
    two windows of one GPU could share a number, which counts and events are keyed on."""
    from gpuobs.recording_file import synthetic
    from gpuobs.recording_file.recording_writer import RecordingWriter

    ev, launches = synthetic.block_trace_events(2, 50, sm_count=8)
    path = tmp_path / "reset.gpuobs"
    with RecordingWriter(path) as w:
        w.run(mode=schema.Mode.BLOCK_TRACE)
        for k in range(2):  # two contexts, each numbering from 0
            w.launches(launches[k : k + 1])
            w.flush(attempted=50, recorded=50, dropped=0)
            w.events(ev[ev["grid_id"] == launches["grid_id"][k]])
        w.end()
    text = " ".join(gpuobs("info", path).stdout.split())
    assert "1 of them have another window's number on the same GPU" in text, text
    assert json.loads(gpuobs("info", path, "--json").stdout)["windows_named_twice"] == 1
    assert "another window's number" not in gpuobs("info", BLOCK).stdout


def test_record_refuses_bad_options_before_running_anything(tmp_path):
    def rec(*args):
        return no_traceback(gpuobs("record", *args, cwd=tmp_path))

    r = rec("--mode", "warp", "--", "true")
    assert r.returncode == 2 and "--mode 'warp' is not one of" in r.stderr
    r = rec("--sample-shift", "40", "--", "true")
    assert r.returncode == 2 and "outside 0..32" in r.stderr
    write_recording(tmp_path / "gpuobs.4242.gpuobs")  # a child's file from an earlier run (pid 4242)
    (tmp_path / "gpuobs.17.gpuobs").write_bytes(b"x")  # not a recording: not the run's to replace
    r = rec("--", "true")
    assert r.returncode == 2 and "gpuobs.4242.gpuobs" in r.stderr and "pass -f/--force" in r.stderr
    (tmp_path / "gpuobs.gpuobs").write_bytes(b"x")
    r = rec("--", "true")
    assert r.returncode == 2 and "gpuobs.gpuobs, gpuobs.4242.gpuobs exist(s)" in r.stderr
    r = rec()
    assert r.returncode == 2 and "no program to run" in r.stderr
    r = rec("-f", "--window-every", "4", "--no-graph-nodes", "--", "true")
    assert r.returncode == 2 and "--window-every needs graph replays listed" in r.stderr
    assert "--no-graph-nodes is deprecated" in r.stderr
    r = rec("-f", "--window-every", "4", "--graph-nodes", "none", "--", "true")
    assert r.returncode == 2 and "--window-every needs graph replays listed" in r.stderr
    r = rec("-f", "--graph-nodes", "sometimes", "--", "true")
    assert r.returncode == 2 and "is not learn, every or none" in r.stderr
    r = rec("-f", "--window-every", "-1", "--", "true")
    assert r.returncode == 2 and "--window-every -1 is outside" in r.stderr


def test_build_says_what_it_compiles(tmp_path):
    """A stand-in nvcc and C++ compiler (they write their -o file): the build's progress lines."""
    from gpuobs.record.native_build import sanitizer_dirs

    from .cli_helpers import fake_toolchain

    if not sanitizer_dirs():
        pytest.skip("no sanitizer headers (the test extra installs them)")
    r = gpuobs("build", **fake_toolchain(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0].startswith("gpuobs: compiling the device patches for sm_75")
    assert lines[1] == "gpuobs: compiling the clock probe (nvcc)..."
    assert lines[2] == "gpuobs: compiling the host tool (fakecxx)..."


def test_a_bug_is_one_line_and_the_traceback_is_on_request():
    import subprocess
    import sys

    from .cli_helpers import repo_env

    code = "import gpuobs.cli as c\ndef boom(**_): raise ZeroDivisionError('x')\nc.app = boom\nc.main()"
    r = subprocess.run([sys.executable, "-c", code], env=repo_env(), capture_output=True, text=True)
    assert r.returncode == 70 and r.stderr.startswith("gpuobs: internal error: ZeroDivisionError: x (please report")
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1
    r = subprocess.run([sys.executable, "-c", code], env=repo_env(GPUOBS_DEBUG="1"), capture_output=True, text=True)
    assert "Traceback" in r.stderr and "ZeroDivisionError" in r.stderr


def test_sorting_by_name_follows_the_names_shown(tmp_path):
    from gpuobs.analysis.kernel_names import short_name

    for report, key, name in (("kernels", "kernel_times", "kernel"), ("blocks", "blocks", "kernel")):
        r = no_traceback(gpuobs("stats", BLOCK, "-r", report, "-s", "name", "--json"))
        assert r.returncode == 0, r.stderr
        shown = [short_name(row[name]) for row in json.loads(r.stdout)[key]["rows"]]
        assert len(shown) > 5 and shown == sorted(shown)


def test_one_recording_named_twice_is_refused(tmp_path):
    r = no_traceback(gpuobs("export", BLOCK, BLOCK, "-o", tmp_path / "t.pftrace"))
    assert r.returncode == 2 and "is named twice: name each recording once" in r.stderr
    shutil.copy(BLOCK, tmp_path / "d.gpuobs")
    os.link(tmp_path / "d.gpuobs", tmp_path / "again.gpuobs")
    r = no_traceback(gpuobs("stats", tmp_path / "d.gpuobs", tmp_path / "again.gpuobs"))
    assert r.returncode == 2 and "are one file: name each recording once" in r.stderr
    assert not (tmp_path / "t.pftrace").exists()


def test_a_launch_range_that_is_not_numbers_says_so(tmp_path):
    r = no_traceback(gpuobs("export", BLOCK, "--launches", "a:b", "-o", tmp_path / "t.pftrace"))
    assert r.returncode == 2 and "--launches 'a:b': 'a' is not a whole number >= 0" in r.stderr


def test_a_reader_that_leaves_early_is_not_a_failure(tmp_path):
    """`gpuobs export ... | head -1`: the trace is written, and the exit status is what
    a shell reports for a closed pipe (141), not 1, with no traceback."""
    import subprocess

    from .cli_helpers import gpuobs_cmd, repo_env

    trace = tmp_path / "t.pftrace"
    proc = subprocess.Popen(
        gpuobs_cmd("export", str(BLOCK), "-o", str(trace)),
        env=repo_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()  # before the export's first line, which comes after a second of work
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 141 and "Traceback" not in stderr, stderr
    assert trace.stat().st_size > 100_000


def test_records_lost_to_damage_are_not_blamed_on_the_mode(tmp_path):
    """A block_trace recording cut inside its first EVENTS chunk, read with --salvage:
    the missing times are put down to the damage, not to a mode that records none."""
    cut = tmp_path / "cut.gpuobs"
    cut.write_bytes(BLOCK.read_bytes()[:100_000])
    r = no_traceback(gpuobs("info", "--salvage", cut))
    assert r.returncode == 0 and "none: no event record survived the damage at byte" in r.stdout, r.stdout
    assert "keeps no device times" not in r.stdout
    r = no_traceback(gpuobs("export", "--salvage", cut, "-o", tmp_path / "cut.pftrace"))
    assert r.returncode == 0 and "their records were lost with the damaged part (from byte" in r.stdout, r.stdout
    assert "it counts, records no times" not in r.stdout


def test_open_refuses_what_it_cannot_serve_before_waiting(tmp_path):
    renamed = tmp_path / "rec.pftrace"
    shutil.copy(BLOCK, renamed)
    (tmp_path / "empty.pftrace").write_bytes(b"")
    (tmp_path / "t.pftrace").write_bytes(b"\\x0a\\x00")
    for args, says in (
        ([renamed], "is a recording: export it first"),
        ([tmp_path / "empty.pftrace"], "is empty: there is no trace to open"),
        ([tmp_path / "t.pftrace", "--timeout", "0"], "--timeout 0: give the seconds to wait"),
        ([tmp_path / "t.pftrace", "--timeout", "nan"], "--timeout nan: give the seconds to wait"),
    ):
        r = no_traceback(gpuobs("open", *args, "--no-browser", timeout=30))
        assert r.returncode == 2 and says in r.stderr, (args, r.stderr)


def test_trimming_a_damaged_recording_says_the_damage_is_not_carried(tmp_path):
    cut = tmp_path / "cut.gpuobs"
    cut.write_bytes(BLOCK.read_bytes()[:-100])
    r = no_traceback(gpuobs("trim", "--salvage", cut, "--flushes", "0:1", "-o", tmp_path / "t.gpuobs"))
    assert r.returncode == 0 and "t.gpuobs does not say that" in r.stderr and "was damaged at byte" in r.stderr
    r = no_traceback(gpuobs("trim", BLOCK, "--flushes", "0:1", "-o", tmp_path / "clean.gpuobs"))
    assert r.returncode == 0 and "damaged" not in r.stderr


def test_two_formats_at_once_are_refused_and_a_zero_file_is_named_once(tmp_path):
    r = no_traceback(gpuobs("stats", BLOCK, "--format", "csv", "--json"))
    assert r.returncode == 2 and "--json and --format csv ask for two formats" in r.stderr
    zeros = tmp_path / "zeros.gpuobs"
    zeros.write_bytes(bytes(4096))
    r = no_traceback(gpuobs("info", zeros))
    assert r.returncode == 2 and r.stderr.count("not a gpuobs recording") == 1, r.stderr


def test_host_trace_kernel_lines_tell_kernels_apart(tmp_path):
    """The per-kernel lines of a --host export: different kernels whose names start
    alike (several vectorized_elementwise_kernel) never print the same text."""
    r = no_traceback(
        gpuobs("export", DATA / "side_by_side_api_trace.gpuobs", "--host", PROFILER, "-o", tmp_path / "t.pftrace")
    )
    assert r.returncode == 0, r.stderr
    names = [line.split(": ")[0].strip() for line in r.stdout.splitlines() if ": " in line and " matched, " in line]
    assert len(names) >= 5 and len(set(names)) == len(names), names


def test_info_shows_the_launch_ids_export_selects_by(tmp_path):
    r = no_traceback(gpuobs("info", BLOCK))
    assert r.returncode == 0 and "ids 905..2386, for export --launches" in r.stdout, r.stdout
    r = no_traceback(gpuobs("export", BLOCK, "--launches", "905:906", "-o", tmp_path / "t.pftrace"))
    assert r.returncode == 0 and "1 kernel slices" in r.stdout, r.stdout


def test_usage_errors_are_one_line_too():
    for args, says in (
        (["stats", "--bogus"], "gpuobs: No such option: --bogus (see "),
        (["nosuch"], "gpuobs: No such command 'nosuch'. (see "),
        (["stats", "--top", "x"], "gpuobs: Invalid value for '--top'"),
    ):
        r = no_traceback(gpuobs(*args))
        assert r.returncode == 2 and r.stderr.startswith(says) and len(r.stderr.splitlines()) == 1, r.stderr
        assert "--help)" in r.stderr
    r = gpuobs()
    assert "Usage:" in r.stdout + r.stderr and "Commands:" in r.stdout + r.stderr


def test_a_damaged_tool_version_is_shown_as_bytes_not_glyphs(tmp_path):
    from gpuobs.recording_file.fileformat import FILE_HEADER

    data = bytearray(BLOCK.read_bytes())
    at = FILE_HEADER.fields["tool_version"][1]
    data[at + 18 : at + 21] = b"\xff\xfe\x07"
    damaged = tmp_path / "d.gpuobs"
    damaged.write_bytes(bytes(data))
    r = no_traceback(gpuobs("info", damaged))
    assert r.returncode == 0 and "\\xff\\xfe\\x07" in r.stdout and "\ufffd" not in r.stdout, r.stdout


def test_review_fixes_old_spelling_duplicates_fifo_and_help_pointer(tmp_path):
    r = no_traceback(gpuobs("export", "-i", BLOCK, "-i", BLOCK, "-o", tmp_path / "d.pftrace"))
    assert r.returncode == 2 and "is named twice" in r.stderr and not (tmp_path / "d.pftrace").exists()
    fifo = tmp_path / "f.pftrace"
    os.mkfifo(fifo)
    r = no_traceback(gpuobs("open", fifo, "--no-browser", timeout=30))  # refused, not waiting for a writer
    assert r.returncode == 2 and "is not a file" in r.stderr, r.stderr
    r = no_traceback(gpuobs("stats", "--top"))
    assert r.returncode == 2 and "requires an argument. (see " in r.stderr and "stats --help)" in r.stderr


def test_record_help_lists_the_modes_in_ladder_order_with_their_cost():
    from gpuobs.record.run import mode_names

    text = gpuobs("record", "-h").stdout
    table = text.split("cheapest first;")[1].split("Example:")[0].splitlines()[1:]
    listed = [line.split()[0] for line in table if line.strip()]
    ladder = ["off", "block_noop", "block_counter", "block_starts", "block_trace_noop", "block_trace"]
    assert listed == ladder + ["mem_noop", "mem_sampled", "mem_full"] and sorted(listed) == sorted(mode_names())
    rows = [line for line in text.splitlines() if line.split()[:1] and line.split()[0] in listed]
    assert all(re.search(r"\d\.\d+-\d+\.\d+x$", row) for row in rows), rows  # each with its measured cost
    capacity = text.split("\n  --capacity")[1].split("\n  --device-memory")[0]
    assert capacity.count("[default: 0]") + capacity.count("(the default)") == 1  # its default said once
    memory = text.split("\n  --device-memory")[1].split("\n  --kernels")[0]
    assert "default 512 MiB" not in memory and memory.count("[default: 512]") == 1


def test_every_command_shows_an_example_and_completion_is_on():
    import typer.main

    from gpuobs.cli import app

    for name in typer.main.get_command(app).commands:
        text = gpuobs(name, "-h").stdout
        example = text.split("Example:\n")[-1].strip().splitlines()
        assert "Example:" in text and example[0].startswith(f"gpuobs {name}"), name
    assert "--install-completion" in gpuobs("-h").stdout
    r = gpuobs("--show-completion", "bash", _TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION="1")
    assert r.returncode == 0 and "complete" in r.stdout, r.stdout + r.stderr


def test_plot_legend_names_are_unique_and_time_has_its_unit(tmp_path):
    """The busiest kernels' legend entries read apart (folded names that would be alike get
    [1], [2]...), and the time axis says its unit: ms over the sample, us inside 1 ms."""
    matplotlib = pytest.importorskip("matplotlib")
    import re as regex

    import gpuobs as g
    from gpuobs.analysis.plot import plot
    from gpuobs.selection import Criteria, select

    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in the SVG
    rec = g.load(BLOCK)
    plot(rec, {0: tmp_path / "all.svg"}, top=6)
    svg = (tmp_path / "all.svg").read_text()
    legend = regex.findall(r">([^<>]+ \([\d,]+\))<", svg)
    assert len(legend) == 6 and len({label.rsplit(" (", 1)[0] for label in legend}) == 6, legend  # apart by name
    assert not any(label.startswith("at::native::") for label in legend)
    assert "first event (ms)" in svg
    keep = select(rec, Criteria.parse(time="11ms:11.5ms", time_option="--time")).events
    plot(rec, {0: tmp_path / "part.svg"}, keep=keep)
    part = (tmp_path / "part.svg").read_text()
    assert "first event (us)" in part
    ticks = [float(t.replace("\u2212", "-")) for t in regex.findall(r">(\u2212?[\d.]+)</text>", part)]
    assert any(11_000 <= t <= 11_500 for t in ticks)  # the axis counts from the recording's first event
