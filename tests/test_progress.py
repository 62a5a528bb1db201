"""The progress bar of info, stats, trim and export (gpuobs/progress.py): drawn on a
terminal once the work has run past DELAY_S, never off a terminal or before then."""

import io

from rich.console import Console
from typer.testing import CliRunner

from gpuobs import cli, progress
from gpuobs.analysis import streamed_facts
from gpuobs.recording_file import synthetic
from gpuobs.recording_file import windows as windows_module
from gpuobs.recording_file.windows import open_windows


def _console(terminal: bool) -> tuple:
    out = io.StringIO()
    return out, Console(file=out, force_terminal=terminal, width=100)


def _recording(tmp_path):
    return synthetic.write_block_trace_recording(tmp_path / "r.gpuobs", n_launches=20, blocks_per_launch=500)


def test_a_bar_once_the_work_runs_past_the_delay(tmp_path, monkeypatch):
    monkeypatch.setattr(windows_module, "SEGMENT_ROWS", 1000)  # ten segments: ten updates
    now = [0.0]
    out, console = _console(True)
    with open_windows(_recording(tmp_path)) as wr, progress.WorkProgress(console, 2.0, lambda: now[0]) as bar:
        seen = []

        def report(what, done=None, total=None):
            now[0] += 0.5  # each segment takes half a second
            seen.append(bar.bar is not None)
            bar(what, done, total)

        streamed_facts.gather(wr, report)
    assert seen[:4] == [False] * 4 and all(seen[4:])  # drawn at the fourth update (2 s) and after
    assert "reading the events of" in out.getvalue() and "%" in out.getvalue()


def test_nothing_off_a_terminal_or_before_the_delay(tmp_path):
    out, console = _console(False)
    with progress.WorkProgress(console, 0.0) as bar:
        bar("reading", 5, 10)
    assert out.getvalue() == ""
    out, console = _console(True)
    with progress.WorkProgress(console, 3600.0) as bar:
        bar("reading", 5, 10)
    assert out.getvalue() == "" and bar.bar is None


def test_the_commands_draw_it_on_stderr(tmp_path, monkeypatch):
    path = _recording(tmp_path)
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    commands = {
        "reading the events of": (["info"], ["stats"], ["trim", "--time", "0ms:1ms", "-o", tmp_path / "t.gpuobs"]),
        "reading flush window 0": (["export", "-o", tmp_path / "t.pftrace"],),
        "writing the blocks of": (["export", "--format", "parquet", "-o", tmp_path / "t.parquet"],),
    }
    for says, each in commands.items():
        for command in each:
            out, console = _console(True)
            monkeypatch.setattr(cli, "err", console)
            result = CliRunner().invoke(cli.app, [command[0], str(path), *map(str, command[1:])])
            assert result.exit_code == 0, result.output
            assert says in out.getvalue(), command
            assert says not in result.output  # stdout keeps only the command's own lines
