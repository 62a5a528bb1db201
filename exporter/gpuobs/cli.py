"""The `gpuobs` command. One convention for every command: recordings are
positional (several where that makes sense), what is written is -o/--output, and
an existing output is replaced only with -f/--force (gpuobs.outputs). Errors are
one line on stderr (`gpuobs: ...`), never a traceback; nothing is silently ignored."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.text import Text

from . import __version__
from .errors import BadMagic, CorruptChunk, RecordingError, TruncatedChunk, one_line
from .recording_file import schema


def _output_width() -> int | None:
    """The width to lay text out in: COLUMNS where set (also piped, as `COLUMNS=100 gpuobs stats
    | less`), else the terminal's; None off a terminal (nothing is cut or wrapped)."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


# Help at the terminal's width (click stops at 80 unless told).
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": max(_output_width() or 80, 40)}
app = typer.Typer(
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings=CONTEXT,
    pretty_exceptions_enable=False,
    help="Record what every thread block of every CUDA kernel did, and view it in Perfetto.",
)


class _Command(typer.core.TyperCommand):
    """A command whose usage line is its `options_metavar`, written out in full
    (`[OPTIONS] [RECORDING]...`): typer would print {TRACE} and types otherwise."""

    def format_usage(self, ctx, formatter):
        formatter.write_usage(ctx.command_path, self.options_metavar)


def command(usage: str, example: str = "", notes: tuple = (), **kwargs):
    """app.command, with the usage line written out and, under the options, `notes`
    (lines kept as written) and an example."""
    lines = list(notes) + (["Example:", "  " + example] if example else [])
    if lines:
        kwargs["epilog"] = "\b\n" + "\n".join(lines)  # \b: click keeps the lines as written
    return app.command(cls=_Command, options_metavar=usage, **kwargs)


# The record modes cheapest first, each with what it adds and its device-time cost against
# no tool on the H200 (the README's ladder: cuBLAS, SDPA, small-block silu*mul, graph decode).
MODE_LADDER = (
    ("off", "launches only", "0.94-1.05x"),
    ("block_noop", "nothing: the cost of a call at block entry", "0.97-1.17x"),
    ("block_counter", "exact blocks per launch", "1.03-1.19x"),
    ("block_starts", "per block: SM, start; end an upper bound", "1.00-1.47x"),
    ("block_trace_noop", "nothing: calls at block entry and exit", "0.97-4.29x"),
    ("block_trace", "per block: SM, start, end", "0.97-5.40x"),
    ("mem_noop", "nothing: a call before every global access", "0.98-9.03x"),
    ("mem_sampled", "exact access counts, 1 in 2^N kept", "0.94-10.25x"),
    ("mem_full", "every access until the buffer fills", "0.97-30.5x"),
)
MODE_NOTES = ("Modes (--mode), cheapest first; device time against no tool on the H200:",) + tuple(
    f"  {name:<17}{what:<44}{cost}" for name, what, cost in MODE_LADDER
)


def _reader_left() -> None:
    """`gpuobs stats | head`: the reader left. Exit with what a shell reports for SIGPIPE
    (141), saying nothing more (stdout to /dev/null, so the interpreter's flush is quiet)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(141)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """rich's writes: rich would exit 1, as if the command had failed."""
        self.quiet = True
        _reader_left()


# Off a terminal nothing wraps: a log line stays one line for grep.
out = _Console(soft_wrap=not sys.stdout.isatty(), highlight=False)
err = _Console(stderr=True, soft_wrap=not sys.stderr.isatty(), highlight=False)
DEFAULT_RECORDING = Path("gpuobs.gpuobs")
TRACE_SUFFIXES = (".pftrace", ".perfetto-trace", ".zip", ".trace")
OPEN_FAILED = "cannot open: "  # how the reader says a file could not be opened
try:  # the click typer parses with: its own copy from typer 0.22 on, else click itself
    from typer._click import exceptions as click_errors
except ImportError:
    from click import exceptions as click_errors
# click 8.2+ answers a bare `gpuobs` with this usage error, whose show() prints the help.
_NO_ARGS_IS_HELP = getattr(click_errors, "NoArgsIsHelpError", ())


def _say(text: str) -> None:
    _inputs_intact()
    out.print(text, markup=False)


def _say_json(value) -> None:
    """JSON to stdout as it is: json.dumps escapes every control and non-ASCII
    character, so no terminal reads it as a command, and rich's console (wrapping
    at the terminal's width, a pass over every character) would only cost time:
    a million notices took it 9 s."""
    _inputs_intact()
    sys.stdout.write(json.dumps(value, indent=2) + "\n")
    sys.stdout.flush()


def _inputs_intact() -> None:
    """Exit 2 with one line when an input was cut short while it was read: what was
    read in its place is zeros, and anything said or raised from them is wrong."""
    from .recording_file.mapping_guard import InputTruncated, check

    try:
        check()
    except InputTruncated as exc:
        err.print(Text.assemble(("gpuobs: ", "bold red"), one_line(exc)))
        sys.exit(2)


def _warn(text: str) -> None:
    err.print(Text.assemble(("gpuobs: warning: ", "yellow"), one_line(text)))


def _fail(message: str, code: int = 2):
    _inputs_intact()
    err.print(Text.assemble(("gpuobs: ", "bold red"), one_line(message)))
    raise typer.Exit(code)


def _deprecated(old: str, new: str) -> None:
    _warn(f"{old} is deprecated and will go; write {new}")


def _version_flag(value: bool):
    if value:
        _say(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version_flag, is_eager=True, help="Print the version and exit."
    ),
):
    pass


# -- reading recordings -------------------------------------------------------------------------------


def _what_it_looks_like(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return ""
    if head.startswith(b"SQLite format 3"):
        return " (it is an SQLite file: an Nsight Systems export? give it to `gpuobs export --host`)"
    if head.lstrip()[:1] in (b"{", b"["):
        return " (it looks like JSON: a PyTorch-profiler trace? give it to `gpuobs export --host`)"
    if head.startswith(b"PK"):
        return " (it is a ZIP: an `export --archive`? open it with `gpuobs open`)"
    if head[:1] == b"\x0a":
        return " (it looks like a Perfetto trace: open it with `gpuobs open`)"
    return ""


def _check_recording_path(path: Path) -> None:
    if not os.path.lexists(path):
        hint = " (run `gpuobs record` here first, or name a recording)" if path == DEFAULT_RECORDING else ""
        _fail(f"no recording at {path}{hint}")


def _load(path: Path, salvage: bool, opener=None):
    from .recording_file.reader import load

    _check_recording_path(path)
    try:
        rec = load(path, salvage=salvage) if opener is None else opener(path)
    except BadMagic as exc:
        reason = exc.reason.removesuffix(": not a gpuobs recording")  # said once, in front
        _fail(f"{path} is not a gpuobs recording" + (_what_it_looks_like(path) or f": {reason}"))
    except (TruncatedChunk, CorruptChunk) as exc:
        hint = "" if salvage else " (--salvage keeps every complete chunk before the damage)"
        _fail(f"{exc}{hint}")
    except RecordingError as exc:
        if exc.offset == 0 and exc.reason.startswith(OPEN_FAILED):  # a folder, a FIFO, no permission...
            _fail(f"cannot read {path}: {exc.reason[len(OPEN_FAILED) :]}")
        _fail(str(exc))
    if rec.damage is not None:
        _warn(
            f"{path}: damaged at byte {rec.damage.offset} ({rec.damage.reason}); kept everything before it, "
            f"lost {rec.damage.bytes_lost} bytes"
        )
    return rec


def _open_for_analysis(path: Path, salvage: bool):
    """A recording read window by window where info, stats and diff can (their events
    read once, a segment at a time: analysis/streamed_facts.py), else loaded whole."""
    from .analysis.streamed_facts import can_stream
    from .recording_file.windows import open_windows

    if salvage or _bounded_ends(path):
        return _load(path, salvage)
    windows = _load(path, False, opener=open_windows)
    if can_stream(windows):
        return windows
    windows.close()
    return _load(path, salvage)


def _bounded_ends(path: Path) -> bool:
    """Whether a recording's RUN chunk says block_starts (loaded whole: its end bounds need
    a window's blocks at once), read without reading the recording; False where it cannot
    tell (reading it then says what is wrong)."""
    from .recording_file.fileformat import NotARecording, run_info

    try:
        run = run_info(path)
    except NotARecording:
        return False
    return run is not None and schema.mode_has(int(run["mode"]), schema.Trait.BOUNDED_ENDS)


@contextlib.contextmanager
def _load_for_analysis(path: Path, salvage: bool):
    """_open_for_analysis in a `with`: closed after, and damage found while the events
    are read (after the index pass) said as _load says it."""
    source = _open_for_analysis(path, salvage)
    try:
        yield source
    except (TruncatedChunk, CorruptChunk) as exc:
        _fail(f"{exc} (--salvage keeps every complete chunk before the damage)")
    finally:
        if hasattr(source, "close"):
            source.close()


def _progress():
    """A progress bar on stderr for work past ~2 s, on a terminal only (gpuobs.progress)."""
    from .progress import WorkProgress

    return WorkProgress(err)


def _default_recordings() -> List[Path]:
    """What `gpuobs record` writes by default here: gpuobs.gpuobs and its child processes' files."""
    from .record.run import child_recordings

    return ([DEFAULT_RECORDING] if DEFAULT_RECORDING.exists() else []) + child_recordings(DEFAULT_RECORDING)


def _recordings_or_default(given: Optional[List[Path]]) -> List[Path]:
    paths = list(given or []) or _default_recordings()
    if not paths:
        _fail(f"no recording at {DEFAULT_RECORDING} (run `gpuobs record` here first, or name a recording)")
    _refuse_duplicates(paths)
    return paths


def _refuse_duplicates(paths: List[Path]) -> None:
    seen = {}  # one file named twice (or through a link) would count its launches twice
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue  # reading it says what is wrong
        first = seen.setdefault((st.st_dev, st.st_ino), path)
        if first is not path:
            same = f"{path} is named twice" if str(first) == str(path) else f"{first} and {path} are one file"
            _fail(f"{same}: name each recording once")


def _check_output(path: Path, inputs, force: bool) -> None:
    from .outputs import OutputError, check_output

    try:
        check_output(path, inputs, force)
    except OutputError as exc:
        _fail(str(exc))


# -- record -------------------------------------------------------------------------------------------


def _program_problem(program: str) -> tuple[str, int] | None:
    """What a shell would say about running `program`, and its exit status, or None."""
    if "/" in program:
        if not os.path.exists(program):
            return f"{program}: no such file or directory", 127
        if os.path.isdir(program) or not os.access(program, os.X_OK):
            return f"{program}: permission denied", 126
        return None
    if shutil.which(program) is None:
        return f"{program}: command not found", 127
    return None


def _with_record_options(func):
    """Gives `record` an option per row of the record options' table
    (schemas/gpuobs_record_options.h: names, default, help), in the table's order,
    before the command's own options (which follow `ctx`; the rows come in **options)."""
    from .record.options import OPTIONS

    params = [p for p in inspect.signature(func).parameters.values() if p.kind is not p.VAR_KEYWORD]
    rows = [
        inspect.Parameter(
            o.name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=o.python_type,
            default=typer.Option(
                o.default,
                *o.cli.split(),
                metavar=o.metavar or None,
                help=o.help_text,
                show_default=not o.has("HELP_HAS_DEFAULT"),
            ),
        )
        for o in OPTIONS.values()
        if o.cli
    ]
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params[1:]]
    func.__signature__ = inspect.Signature([params[0], *rows, *own])
    func.__annotations__ = {**func.__annotations__, **{p.name: p.annotation for p in rows}}
    return func


# Options end at the program's name: what follows is the program's own (`record python x.py -f` passes -f to x.py).
@command(
    "[OPTIONS] -- CMD [ARGS]...",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False},
    short_help="Run a program with every kernel patched, and record it.",
    example="gpuobs record -m block_counter -- python train.py",
    notes=MODE_NOTES,
)
@_with_record_options
def record(
    ctx: typer.Context,
    no_graph_nodes: bool = typer.Option(
        False, "--no-graph-nodes", hidden=True, help="deprecated spelling of --graph-nodes none"
    ),
    force: bool = typer.Option(False, "--force", "-f", help="replace an earlier run's recordings"),
    **options,
):
    """Run a program with every kernel patched and record it: gpuobs record [OPTIONS] -- CMD [ARGS]..."""
    from .record.follower import Follower
    from .record.native_build import NativeUnavailable, build
    from .record.options import OPTIONS
    from .record.run import (
        EarlierRecordings,
        FolderBusy,
        RecordOptions,
        child_recordings,
        lock_output_folder,
        outputs_of_run,
        run_recorded,
        tool_environment,
    )

    cmd = list(ctx.args)
    if not cmd:
        _fail("no program to run: gpuobs record [OPTIONS] -- CMD [ARGS...]")
    if cmd[0].startswith("-") and cmd[0] != "-":
        _fail(f"no such option: {cmd[0]} (see gpuobs record --help; the program to run comes after --)")
    if no_graph_nodes:
        _deprecated("--no-graph-nodes", "--graph-nodes none")
        options["graph_nodes"] = "none"
    for name, value in options.items():  # in the table's order: the first bad one is said
        o = OPTIONS[name]
        problem = o.problem(value, f"{o.flag} {value!r}" if o.is_kind("MODE", "CHOICE") else f"{o.flag} {value}")
        if problem:
            _fail(problem)
    if options["duty"] and (options["window_every"] or options["paused"]):
        _fail(
            f"--duty and {'--window-every' if options['window_every'] else '--paused'} are two ways to turn "
            "windows: choose one"
        )
    if options["window_every"] and options["graph_nodes"] == "none":
        _fail(
            "--window-every needs graph replays listed: with --graph-nodes none a graph replay may still run "
            "where a window turns"
        )
    output = options["output"]
    problem = _program_problem(cmd[0])
    if problem:
        _fail(*problem)
    try:  # held until gpuobs exits: what -f sets aside below is this run's alone
        _folder_lock = lock_output_folder(output.parent)  # noqa: F841
    except FolderBusy as exc:
        _fail(str(exc))
    stale = ([output] if os.path.lexists(output) else []) + child_recordings(output)
    if stale and not force:
        _fail(
            f"{', '.join(map(str, stale))} exist(s) from an earlier run; pass -f/--force to replace them, "
            "or -o to write elsewhere"
        )
    if output.is_dir():
        _fail(f"cannot write {output}: it is a folder")
    if not output.parent.is_dir():
        _fail(f"cannot write {output}: folder {output.parent} does not exist")
    try:
        native = _build_with_progress(build)
    except NativeUnavailable as exc:
        _fail(str(exc))
    opts = RecordOptions(**options)
    env = tool_environment(native, opts)
    for left in EarlierRecordings.left_by_killed_runs(output.parent):
        _warn(f"{left} holds recordings a killed `gpuobs record -f` moved aside; they are left as they are")
    try:  # an earlier run's files must not mix into this run's, nor be lost if this one records nothing
        earlier = EarlierRecordings(stale)
    except OSError as exc:
        _fail(f"cannot move the earlier recordings aside in {output.parent}: {exc.strerror or exc}")
    started = time.time()
    follower = Follower(output)  # the summary's facts worked out while the program runs
    try:
        code = run_recorded(cmd, env, started=follower.start)
    except OSError as exc:  # the check above raced with the file system
        earlier.keep()
        _fail(f"{cmd[0]}: {exc.strerror.lower() if exc.strerror else exc}", 126)
    except BaseException:
        earlier.keep()
        raise
    finally:
        follower.stop()
    if os.environ.get("GPUOBS_DEBUG"):
        err.print(
            f"gpuobs: the summary's follower: {follower.looks} looks, {follower.busy_s:.2f} s of CPU"
            + (f"; stopped early: {follower.error}" if follower.error else ""),
            markup=False,
        )
    files = outputs_of_run(output, started)
    if files:
        earlier.discard()
    else:
        kept = earlier.keep()
        _warn(
            "the program wrote no recording (did it use CUDA? see 'gpuobs:' lines above)"
            + (f"; kept the earlier {', '.join(map(str, kept))}" if kept else "")
        )
    for path in files:
        _print_record_summary(path, follower.cache_for(path))
    if code != 0:
        err.print(f"gpuobs: the program exited with status {code}", markup=False)
    raise typer.Exit(code)


def _print_record_summary(path: Path, cache=None) -> None:
    """record's line about a recording it made; `cache`: the growing chunks' facts that
    record/follower.py found while the program ran (the rest is read now)."""
    from .record.finish import summarise

    began = time.perf_counter()
    try:  # its small chunks only: a recording of any size is summarised in well under a second
        rec, s = summarise(path, cache)
    except RecordingError as exc:
        err.print(f"gpuobs: {one_line(exc)}", markup=False)
        return
    if os.environ.get("GPUOBS_DEBUG"):  # what the finish cost, for benchmarks/soak.py
        err.print(
            f"gpuobs: summary of {path} in {time.perf_counter() - began:.3f} s: {s['chunks_from_follower']:,} of "
            f"{s['growing_chunks']:,} launch, count and API chunks read while the program ran",
            markup=False,
        )
    dmg = f", damaged tail at byte {rec.damage.offset}" if rec.damage else ""
    err.print(
        f"gpuobs: {path}: {s['mode']}, {s['launches']} launches of {s['functions']} kernels, "
        f"{s['modules_patched']} modules patched ({s['modules_failed']} failed"
        + (
            f", {s['modules_deferred']} loaded while paused, patched at their first window"
            if s["modules_deferred"]
            else ""
        )
        + "); "
        f"counted {s['counted']:,}; events kept {s['block_events'] + s['memory_events']:,}; "
        f"attempted {s['attempted']:,} = recorded {s['recorded']:,} + dropped {s['dropped']:,}"
        + (f"; sampled out {rec.totals['sampled_out']:,} (see `gpuobs info`)" if rec.totals["sampled_out"] else "")
        + f"{dmg}{'' if s['complete'] else ', run did not close cleanly'}"
        + (
            f"; {s['unconfirmed_ends']:,} block ends stamped by a later run of their grid (flagged)"
            if s["unconfirmed_ends"]
            else ""
        )
        + (
            f"; {s['events_unattributed']:,} records of no listed launch (see `gpuobs info`)"
            if s["events_unattributed"]
            else ""
        )
        + (f"; {s['api_calls']:,} CUDA API calls" if s["api_calls"] else "")
        + (
            f"; {s['unrecorded_launches']:,} launches ran outside recording windows or a duty cycle's on time "
            "(not recorded, not in the trace)"
            if s["unrecorded_launches"]
            else ""
        )
        + (
            f"; {s['device_launches']:,} of the launches were made by kernels (dynamic parallelism)"
            if s["device_launches"]
            else ""
        ),
        markup=False,
    )
    # What the tool could not record, said once more after the program's own output.
    for note in s["notices"]:
        err.print(f"gpuobs: {path}: {'NOTHING WAS RECORDED: ' if s['launches'] == 0 else ''}{note}", markup=False)


def _build_with_progress(build, force: bool = False):
    """build(), saying which part compiles when it compiles anything (the first run takes seconds)."""
    started = time.monotonic()
    result = build(force=force, progress=lambda message: err.print(f"gpuobs: {message}...", markup=False))
    if time.monotonic() - started > 1:
        err.print(f"gpuobs: built in {time.monotonic() - started:.1f} s (cached for later runs)", markup=False)
    return result


# -- info -----------------------------------------------------------------------------------------------


@command("[OPTIONS] [RECORDING]...", example="gpuobs info run.gpuobs --format json")
def info(
    recordings: Optional[List[Path]] = typer.Argument(None, metavar="[RECORDING]...", hidden=True),
    salvage: bool = typer.Option(False, "--salvage", help="read a damaged recording up to the damage"),
    fmt: str = typer.Option(
        "table",
        "--format",
        metavar="FORMAT",
        help="table or json (json: an object for one recording, a list of them for several)",
    ),
    as_json: bool = typer.Option(False, "--json", help="same as --format json"),
):
    """Summarise recordings (default: ./gpuobs.gpuobs and its children's): what ran, on which GPU, for how
    long, what was counted, kept and dropped, and the flush windows `trim` selects by index."""
    from .analysis.recording_info import describe, text

    if as_json and fmt not in ("table", "json"):
        _fail(f"--json and --format {fmt} ask for two formats: give one")
    if fmt not in ("table", "json"):
        _fail(f"--format {fmt!r} is not table or json (info is one record per recording, not a table of rows)")
    described = []
    with _progress() as progress:
        for path in _recordings_or_default(recordings):
            with _load_for_analysis(path, salvage) as source:
                described.append(describe(source, progress))
    if as_json or fmt == "json":
        _say_json(described[0] if len(described) == 1 else described)
        return
    width = _output_width()
    for i, d in enumerate(described):
        if i:
            _say("")
        for line in text(d):
            for part in _hanging(line, width, INFO_VALUE_COLUMN):
                _say(part)


INFO_VALUE_COLUMN = 18  # recording_info.text: "  {label:<15} {value}"


def _hanging(line: str, width: int | None, value_at: int | None = None) -> list:
    """`line` wrapped to `width`, its continuation lines indented as it is or, for a
    `  key  value` line whose value starts at column `value_at`, under the value: a
    key/value listing keeps its two columns at any width."""
    import textwrap

    if width is None or len(line) <= width:
        return [line]
    hang = len(line) - len(line.lstrip())
    if value_at is not None and hang == 2 and value_at >= width // 2:
        # Too narrow for two columns: the key on a line of its own, its value under it,
        # indented past every key, so that keys and values still read apart.
        key, value = line[:value_at].strip(), line[value_at:]
        indent = " " * 6
        under = textwrap.wrap(
            value,
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        )
        return ([f"  {key}"] if key else []) + (under or [line])
    if value_at is not None and hang == 2:
        hang = value_at
    return textwrap.wrap(line, width, subsequent_indent=" " * hang, break_on_hyphens=False, break_long_words=False) or [
        line
    ]


# -- stats ----------------------------------------------------------------------------------------------

REPORTS = ("kernels", "blocks", "all")
REPORT_ALIASES = {"cuda_gpu_kern_sum": "kernels", "kern_sum": "kernels"}


@command("[OPTIONS] [RECORDING]...", example="gpuobs stats run.gpuobs -r blocks --sort p99")
def stats(
    recordings: Optional[List[Path]] = typer.Argument(None, metavar="[RECORDING]...", hidden=True),
    report: str = typer.Option(
        "all",
        "--report",
        "-r",
        metavar="REPORT",
        help="kernels: per kernel time summary (as nsys cuda_gpu_kern_sum); "
        "blocks: per kernel blocks, SMs, block durations, counts, drops; "
        "all: both [default: all]",
        show_default=False,
    ),
    sort: Optional[str] = typer.Option(
        None,
        "--sort",
        "-s",
        metavar="KEY",
        help="kernels: total (default), instances, avg, med, min, max, stddev, "
        "name; blocks: blocks (default), launches (= instances), p50, p99, counted, name; "
        "with both reports any of these: a report without the key keeps its default",
    ),
    fmt: str = typer.Option("table", "--format", metavar="FORMAT", help="table, csv or json"),
    as_json: bool = typer.Option(False, "--json", help="same as --format json"),
    top: Optional[int] = typer.Option(
        None, "--top", metavar="N", help="rows per report (table default 30; csv and json: all)"
    ),
    salvage: bool = typer.Option(False, "--salvage", help="read a damaged recording up to the damage"),
):
    """Per kernel statistics of recordings (default: ./gpuobs.gpuobs and its children's), led by the kernel
    time summary: Time %, total, instances, avg/med/min/max/stddev of each launch's span."""
    from .analysis import stats_report

    if as_json and fmt not in ("table", "json"):
        _fail(f"--json and --format {fmt} ask for two formats: give one")
    fmt = "json" if as_json else fmt
    report = REPORT_ALIASES.get(report, report)
    if fmt not in ("table", "csv", "json"):
        _fail(f"--format {fmt!r} is not table, csv or json")
    if report not in REPORTS:
        _fail(f"--report {report!r} is not one of {', '.join(REPORTS)}")
    if sort is not None:
        keys = stats_report.sort_keys(report)
        if sort not in keys:
            _fail(
                f"--sort {sort!r} is not one of {', '.join(keys)}"
                + ("" if report == "all" else f" for --report {report}")
            )
    if top is not None and top < 1:
        _fail(f"--top {top}: give 1 or more rows")
    paths = _recordings_or_default(recordings)
    results = []
    with _progress() as progress:
        for path in paths:
            with _load_for_analysis(path, salvage) as source:
                results.append(stats_report.build(source, report, sort, top, fmt, progress))
    for r in results:
        if fmt != "table" and "kernel_times" in r and not r["kernel_times"]["timed"]:
            _warn(f"{r['recording']}: mode {r['mode']} records no block times: the kernel time summary is empty")
    width = _output_width()
    if fmt == "json":
        _say_json(results[0] if len(results) == 1 else results)
    elif fmt == "csv":
        _say(stats_report.as_csv(results).rstrip("\n"))
    else:
        text = "\n\n".join(stats_report.as_text(r, width) for r in results)
        for line in text.split("\n"):  # the tables fit already; their notes wrap
            for part in _hanging(line, width):
                _say(part)


# -- export ---------------------------------------------------------------------------------------------


def _export_paths(positional: List[Path], inputs: List[Path], output: Optional[Path], archive: bool):
    """(recordings, output) from today's spelling (`export REC... -o OUT`) or the old one
    (`export -i REC OUT`, `export OUT`), which still works with a deprecation line."""
    if inputs:
        if output is None and len(positional) == 1:
            _deprecated("`gpuobs export -i REC OUT`", "`gpuobs export REC -o OUT`")
            output = positional[0]
        elif positional:
            _fail("give recordings either positionally or with -i, and the output with -o")
        else:
            _deprecated("`-i/--input`", "the recordings as positional arguments")
        _refuse_duplicates(inputs)
        return inputs, output
    if (
        output is None
        and len(positional) == 1
        and positional[0].suffix in TRACE_SUFFIXES
        and not positional[0].is_file()
    ):
        _deprecated(f"`gpuobs export {positional[0]}` (the output positional)", f"`gpuobs export -o {positional[0]}`")
        return _recordings_or_default(None), positional[0]
    looks_like_traces = [p for p in positional if p.suffix in TRACE_SUFFIXES]
    if looks_like_traces and output is None:
        _fail(
            f"{looks_like_traces[0]} looks like a trace, not a recording: recordings are positional, the "
            f"trace to write is -o/--output (gpuobs export REC... -o {looks_like_traces[0]})"
        )
    recordings = _recordings_or_default(positional)
    if output is None:
        output = Path(recordings[0].stem + (".zip" if archive else ".pftrace"))
    return recordings, output


@command("[OPTIONS] [RECORDING]... [-o TRACE]", example="gpuobs export run.gpuobs -o run.pftrace --open")
def export(
    recordings: Optional[List[Path]] = typer.Argument(None, metavar="[RECORDING]...", hidden=True),
    output: Optional[Path] = typer.Option(
        None,
        "-o",
        "--output",
        metavar="FILE",
        help="the trace to write [default: ./STEM.pftrace of the first recording; .zip with --archive]",
    ),
    force: bool = typer.Option(False, "--force", "-f", help="replace an existing output"),
    open_ui: bool = typer.Option(False, "--open", help="then open it in the Perfetto UI (as `gpuobs open`)"),
    kernels: Optional[str] = typer.Option(
        None, "--kernels", metavar="REGEX", help="only launches of kernels whose name matches this regex"
    ),
    launches: Optional[str] = typer.Option(None, "--launches", metavar="A:B", help="launch ids A <= id < B"),
    time_window: Optional[str] = typer.Option(
        None,
        "--time-window",
        metavar="START:END",
        help="only what starts in this window, counted from the recording's "
        "first event, with units (ns, us, ms, s), e.g. 1ms:5ms or 2s: "
        "(`gpuobs info` shows the span)",
    ),
    clock: str = typer.Option(
        "auto",
        "--clock",
        metavar="CLOCK",
        help="auto: relate each GPU clock to host clocks where measured; device: never",
    ),
    samples: bool = typer.Option(
        False, "--samples", help="also write each sampled memory access as an instant (memory modes)"
    ),
    block_args: bool = typer.Option(
        True, "--block-args/--no-block-args", help="block coordinates and launch id on every block slice"
    ),
    salvage: bool = typer.Option(False, "--salvage", help="read damaged recordings up to the damage"),
    host: Optional[List[Path]] = typer.Option(
        None,
        "--host",
        metavar="FILE",
        help="a separate, uninstrumented run's trace: PyTorch-profiler JSON, or "
        "an Nsight Systems SQLite export (nsys export --type sqlite)",
    ),
    align: Optional[str] = typer.Option(
        None, "--align", metavar="kernels", help="shift --host traces so matched kernels line up (labelled)"
    ),
    archive: bool = typer.Option(
        False,
        "--archive",
        help="write a .zip: the gpuobs trace plus the untouched --host files and a "
        "perfetto_manifest relating them (Perfetto v58+ opens it as one trace)",
    ),
    inputs: Optional[List[Path]] = typer.Option(None, "-i", "--input", hidden=True),
    fmt: str = typer.Option(
        "perfetto",
        "--format",
        metavar="FORMAT",
        help="perfetto: one trace; parquet: a directory of tables (launches, blocks, ...) for DuckDB or Spark, "
        "-o DIR [default: ./STEM.parquet] (docs/parquet-schema.md)",
    ),
):
    """Write recordings (default: ./gpuobs.gpuobs and its children's) as one Perfetto trace: per GPU a
    device-clock group, kernels, one track per SM."""
    if fmt not in ("perfetto", "parquet"):
        _fail(f"--format {fmt!r} is not perfetto or parquet")
    if fmt == "parquet":  # gpuobs.columnar.command: pip install 'gpuobs[parquet]'
        from .columnar.command import export_parquet

        given = {"--open": open_ui, "--host": host, "--align": align, "--archive": archive, "--samples": samples}
        given.update({"--clock": clock != "auto", "--no-block-args": not block_args, "-i": inputs})
        trace_only = [flag for flag, value in given.items() if value]
        return export_parquet(recordings, output, force, salvage, kernels, launches, time_window, trace_only)
    from .host_traces.kineto import HostTraceError
    from .host_traces.nsys import load_host_trace
    from .outputs import OutputError, write_atomically
    from .perfetto_export.export import ExportError, ExportOptions
    from .perfetto_export.export import export as run_export

    paths, output = _export_paths(list(recordings or []), list(inputs or []), output, archive)
    hosts_given = list(host or [])
    if align is not None and align != "kernels":
        _fail(f"--align {align!r}: only 'kernels' is known")
    if align and not hosts_given:
        _fail("--align kernels lines up --host traces with the recording: pass --host FILE")
    if archive and not hosts_given:
        _fail("--archive packs --host traces beside the gpuobs trace: pass at least one --host")
    if archive and output.suffix != ".zip":
        _fail(f"--archive writes a ZIP: name the output .zip (not {output.name})")
    if not archive and output.suffix == ".zip":
        _fail(f"{output.name}: a .zip output is an --archive; add --archive (with --host) or name a .pftrace")
    from .input_files import describe, open_regular

    for h in hosts_given:  # checked before anything is read or written
        try:
            open_regular(h).close()
        except OSError as exc:
            _fail(f"--host {h}: cannot read: {describe(exc)}")
    _check_output(output, paths + hosts_given, force)  # first: an output that is an input says so
    if output.name.lower().endswith((".json", ".json.gz")):  # it would hold protobuf under a JSON name
        _fail(f"-o {output}: export writes a Perfetto protobuf trace, not JSON: name it .pftrace")
    if hosts_given:  # a host trace's columns, made and dropped by the dozen: their pages kept
        from .malloc_policy import keep_freed_blocks

        keep_freed_blocks()
    loaded = [_load_for_export(p, salvage, streamable=not (hosts_given or samples)) for p in paths]
    try:
        hosts = [load_host_trace(h) for h in hosts_given]
    except HostTraceError as exc:
        _fail(str(exc))
    if samples and not any(int((r.events["kind"] == 2).sum()) for r in loaded):
        modes = ", ".join(sorted({r.run.mode_name if r.run else "unknown" for r in loaded}))
        _warn(f"--samples: no memory samples to write (mode {modes}); record with --mode mem_sampled or mem_full")
    opts = ExportOptions(
        kernels=kernels,
        launches=launches,
        time_window=time_window,
        clock=clock,
        samples=samples,
        block_args=block_args,
        align=align,
        host_tracks=not archive,
    )
    try:
        with write_atomically(output, paths + hosts_given, force) as fh:
            summary = _run_export(run_export, loaded, fh, opts, hosts, archive)
    except (ExportError, OutputError) as exc:
        _fail(str(exc))
    _print_export_summary(summary, output)
    from .perfetto_export.export import ui_advice

    for advice in ui_advice(summary, loaded):
        _warn(advice)
    if open_ui:
        _open(output)


def _load_for_export(path: Path, salvage: bool, streamable: bool):
    """A recording the Perfetto export streams a flush window at a time where it can
    (perfetto_export/streamed.py: bounded memory), else the whole recording."""
    from .perfetto_export.export import ExportOptions
    from .perfetto_export.streamed import can_stream
    from .recording_file.reader import _BadValueAt
    from .recording_file.windows import open_windows

    if salvage or not streamable:
        return _load(path, salvage)
    try:
        windows = _load(path, False, opener=open_windows)
    except _BadValueAt as bad:  # a value check of the windowed reader: the chunk's own error
        _fail(f"{bad.error} (--salvage keeps every complete chunk before the damage)")
    if can_stream(windows, ExportOptions(), ()):
        return windows
    windows.close()
    return _load(path, salvage)


def _run_export(run_export, recordings, fh, opts, hosts, archive):
    """The export into `fh`, with a progress bar past ~2 s; an archive zips a temp trace."""
    if archive:
        import tempfile

        from .perfetto_export.archive import write_archive

        with tempfile.TemporaryFile() as trace:  # unnamed: nothing to plant a link at
            summary = _run_export(run_export, recordings, trace, opts, hosts, False)
            trace.seek(0)
            summary.bytes = write_archive(fh, trace, hosts, summary.hosts, summary.clock_related)
        return summary
    with _progress() as progress:
        return run_export(recordings, fh, opts, progress, hosts)


def _print_export_summary(summary, output: Path) -> None:
    from .analysis.kernel_names import short_names

    _say(
        f"{output}: {summary.bytes / 1e6:.1f} MB, {summary.tracks:,} tracks, "
        f"{summary.block_slices:,} block slices, {summary.kernel_slices:,} kernel slices"
    )
    for g in summary.gpus:
        drops = f"{g.dropped:,} records DROPPED (buffer full)" if g.dropped else "nothing dropped"
        memory = ""
        if schema.mode_has(g.mode, schema.Trait.MEMORY_PATCH):
            memory = f", {g.memory_events:,} memory samples ({g.accesses_counted:,} accesses counted)"
        blocks = f"{g.sms} SMs ({g.lanes} lanes), {g.block_slices:,} blocks, " if g.block_slices else ""
        _say(f"  {g.label}: {blocks}{g.kernel_slices:,} kernels{memory}, {drops}; clock: {g.clock}")
        if g.end_bounds:
            shares = ", ".join(f"{n:,} {label}" for label, n in g.end_bounds.items() if n)
            _say(f"    block ends are upper bounds (block_starts records none): {shares} (`gpuobs stats` explains)")
        if g.ends_unconfirmed:
            _say(
                f"    {g.ends_unconfirmed:,} block ends were stamped by a later run of their grid: drawn at their "
                "start, named '(end unconfirmed)'"
            )
        if g.unrecorded_launches:
            _say(
                f"    {g.unrecorded_launches:,} launches ran outside recording windows or a duty cycle's on time: "
                "not in the trace"
            )
        if g.launches_without_time and schema.mode_has(g.mode, schema.Trait.MEMORY_PATCH):
            _say(
                f"    {g.launches_without_time:,} launches kept no sampled access, so they have no time and no "
                f"kernel slice; their {g.accesses_unplaced:,} accesses are counted, not on the counter track"
            )
        elif g.launches_without_time and g.damaged_at is not None:
            _say(
                f"    {g.launches_without_time:,} launches have no device times and no kernel slice: "
                f"their records were lost with the damaged part (from byte {g.damaged_at})"
            )
        elif g.launches_without_time and schema.mode_has(g.mode, schema.Trait.BLOCK_RECORDS):
            _say(
                f"    {g.launches_without_time:,} launches have no block recorded (sampled out, or dropped), so "
                "they have no kernel slice; their counts are exact (`gpuobs info`)"
            )
        elif g.launches_without_time:
            _say(
                f"    {g.launches_without_time:,} launches have no device times in mode {g.mode} (it counts, "
                "records no times), so they have no kernel slice"
            )
    for a in summary.api:
        if a.shown:
            _say(
                f"  CUDA API calls of pid {a.pid}: {a.calls:,} calls on {a.threads} "
                f"thread{'' if a.threads == 1 else 's'}, host clock; "
                f"{a.flows:,} flows to kernel slices"
            )
        else:
            _say(f"  CUDA API calls of pid {a.pid}: {a.calls:,} recorded, not shown: {a.why_not}")
    for h in summary.hosts:
        shift = (
            f"; shifted {h.shift_ns / 1e6:+.3f} ms to line up kernels (residual {h.residual_ns / 1e3:.1f} us)"
            if h.shift_ns
            else ""
        )
        _say(
            f"  host trace {h.path}: {h.events:,} events, {h.matched:,} of {h.kernels:,} kernels "
            f"matched ({h.unmatched_gpuobs:,} gpuobs launches unmatched); clock {h.clock}{shift}"
        )
        if h.before_boot:
            _warn(
                f"{h.before_boot:,} of {h.path}'s {h.events:,} events fall before the recording machine's boot on "
                "its REALTIME clock (a run from an earlier boot or another machine); Perfetto drops them. "
                "Add --align kernels to place the run by its kernels."
            )
        rows = h.per_kernel[:8]
        for row, name in zip(rows, short_names([row["kernel"] for row in rows])):
            _say(
                f"    {name}: {row['matched']} matched, "
                f"uninstrumented {row['uninstrumented_us']:.1f} us, "
                f"instrumented {row['instrumented_us']:.1f} us ({row['ratio']:.2f}x)"
            )
    _say(f"Open it with `gpuobs open {output}`, at ui.perfetto.dev, or in trace_processor.")


# -- open -----------------------------------------------------------------------------------------------


def _open(
    trace: Path,
    port: int = 9001,
    ui_url: Optional[str] = None,
    browser: Optional[bool] = None,
    timeout_s: float = 600.0,
) -> None:
    from .perfetto_export.open_trace import DEFAULT_UI, OpenError, serve

    try:
        served = serve(
            trace, port=port, ui_url=ui_url or DEFAULT_UI, open_browser=browser, timeout_s=timeout_s, say=_say
        )
    except OpenError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        _fail("stopped (Ctrl-C) before the UI fetched the trace", 130)
    if not served.fetched:
        _fail(f"the UI did not fetch {trace} within {timeout_s:.0f} s; stopped serving (--timeout sets how long)", 1)
    _say("the UI has the trace; stopped serving")


@command("[OPTIONS] TRACE", name="open", example="gpuobs open run.pftrace --no-browser")
def open_cmd(
    trace: Path = typer.Argument(..., metavar="TRACE", hidden=True),
    port: int = typer.Option(
        9001, "--port", metavar="PORT", help="local port to serve on (ui.perfetto.dev fetches only from 9001)"
    ),
    ui_url: Optional[str] = typer.Option(
        None, "--ui-url", metavar="URL", help="the Perfetto UI to open [default: https://ui.perfetto.dev]"
    ),
    browser: Optional[bool] = typer.Option(
        None,
        "--browser/--no-browser",
        help="open a browser, or only print the address [default: open one where there is a display]",
        show_default=False,
    ),
    timeout_s: float = typer.Option(
        600, "--timeout", metavar="SECONDS", help="stop serving if the UI has not fetched the trace by then"
    ),
):
    """Open TRACE (a .pftrace, or an --archive .zip) in the Perfetto UI: serve it once on 127.0.0.1 and open
    the UI at it; on a machine without a display, print the address and the ssh port-forward to use."""
    from .input_files import open_regular
    from .recording_file.fileformat import MAGIC

    if not 1 <= port <= 65535:
        _fail(f"--port {port} is outside 1..65535")
    if not 0 < timeout_s <= 86400:  # NaN too
        _fail(f"--timeout {timeout_s:g}: give the seconds to wait, more than 0 and at most 86400")
    try:  # a regular file only: opening a FIFO would wait for a writer
        with open_regular(trace) as f:
            head = f.read(len(MAGIC))
    except OSError:
        head = None  # serving it says what is wrong
    if trace.suffix == ".gpuobs" or head == MAGIC:
        _fail(f"{trace} is a recording: export it first (gpuobs export {trace} --open)")
    if head == b"":
        _fail(f"{trace} is empty: there is no trace to open")
    if port != 9001 and ui_url is None:
        _warn(
            f"ui.perfetto.dev fetches traces only from port 9001: with --port {port}, give --ui-url of a "
            "Perfetto UI that may fetch from it (one you run yourself), or open the file in the UI by hand"
        )
    _open(trace, port, ui_url, browser, timeout_s)


# -- plot -----------------------------------------------------------------------------------------------

PLOT_SUFFIXES = (".png", ".svg", ".pdf")


@command(
    "[OPTIONS] [RECORDING] [-o IMAGE]", name="plot", example="gpuobs plot run.gpuobs -o occupancy.svg --time 10ms:20ms"
)
def plot_cmd(
    recording: Optional[Path] = typer.Argument(None, metavar="[RECORDING]", hidden=True),
    output: Optional[Path] = typer.Option(
        None,
        "-o",
        "--output",
        metavar="FILE",
        help="image to write (.png, .svg or .pdf) [default: the recording's name, .png, in the current folder]; "
        "one per GPU as STEM.gpuN.png when there are several",
        show_default=False,
    ),
    force: bool = typer.Option(False, "--force", "-f", help="replace existing images"),
    time_range: Optional[str] = typer.Option(
        None,
        "--time",
        metavar="START:END",
        help="only launches running in this window, whole, counted from the recording's first event, with "
        "units, e.g. 10ms:20ms (as trim --time: the plot of what trim keeps)",
    ),
    time_window: Optional[str] = typer.Option(
        None,
        "--time-window",
        metavar="START:END",
        help="only blocks that start in this window (as export --time-window: the plot of what the trace shows)",
    ),
    kernels: Optional[str] = typer.Option(
        None, "--kernels", metavar="REGEX", help="only blocks of kernels whose name matches this regex"
    ),
    salvage: bool = typer.Option(False, "--salvage", help="read a damaged recording up to the damage"),
):
    """SM x time occupancy heatmap and block-duration histograms of a recording (default ./gpuobs.gpuobs;
    needs matplotlib: pip install 'gpuobs[plot]')."""
    from .analysis.plot import NoBlockChosen, PlotUnavailable, blocks_chosen, plot, plot_paths
    from .errors import SelectionError
    from .outputs import OutputError

    path = recording or DEFAULT_RECORDING
    output = output or Path(path.stem + ".png")  # as export names its trace
    if output.suffix.lower() not in PLOT_SUFFIXES:
        _fail(f"-o {output}: plot writes images: name it .png, .svg or .pdf")
    rec = _load(path, salvage)
    targets = plot_paths(rec, output)
    if not targets and rec.damage is not None:
        _fail(f"{path} holds no block records to plot: none survived the damage at byte {rec.damage.offset}")
    if not targets:
        _fail(
            f"{path} holds no block records to plot (mode {rec.run.mode_name if rec.run else 'unknown'}; "
            "record with --mode block_trace)"
        )
    try:
        keep = blocks_chosen(rec, kernels=kernels, time=time_range, time_window=time_window)
    except NoBlockChosen as exc:
        _fail(f"{exc} of {path}: nothing to plot, nothing was written")
    except SelectionError as exc:
        _fail(str(exc))
    if keep is not None:
        targets = {d: t for d, t in targets.items() if (keep & (rec.event_devices == d)).any()}
    for target in targets.values():
        _check_output(target, [path], force)
    try:
        written = plot(rec, targets, inputs=[path], force=force, keep=keep)
    except (PlotUnavailable, OutputError) as exc:
        _fail(str(exc))
    for target in written:
        _say(f"wrote {target}")


# -- trim -----------------------------------------------------------------------------------------------


@command("[OPTIONS] RECORDING -o FILE", example="gpuobs trim run.gpuobs -o part.gpuobs --time 10ms:20ms")
def trim(
    recording: Path = typer.Argument(..., metavar="RECORDING", hidden=True),
    old_output: Optional[Path] = typer.Argument(None, hidden=True),
    output: Optional[Path] = typer.Option(None, "-o", "--output", metavar="FILE", help="recording to write"),
    force: bool = typer.Option(False, "--force", "-f", help="replace an existing output"),
    flushes: Optional[str] = typer.Option(
        None, "--flushes", metavar="A:B", help="flush windows A <= index < B, as `gpuobs info` lists them"
    ),
    time_range: Optional[str] = typer.Option(
        None,
        "--time",
        metavar="START:END",
        help="launches running in this window, counted from the recording's first event, with units, e.g. 10ms:20ms",
    ),
    kernels: Optional[str] = typer.Option(
        None, "--kernels", metavar="REGEX", help="launches of kernels whose name matches this regex"
    ),
    salvage: bool = typer.Option(False, "--salvage", help="read a damaged recording up to the damage"),
):
    """Copy part of RECORDING to share it: whole flush windows, launches in a time window, or launches of some
    kernels (the selections combine; an empty one is refused)."""
    from .analysis.trim import TrimError, select
    from .outputs import OutputError, write_atomically
    from .ranges import RangeError, parse_range, parse_time_range
    from .recording_file.recording_writer import copy_recording

    if old_output is not None:
        if output is not None:
            _fail("give the output once, with -o")
        _deprecated("`gpuobs trim IN OUT`", "`gpuobs trim IN -o OUT`")
        output = old_output
    if output is None:
        _fail("trim writes a new recording: name it with -o FILE")
    if not (flushes or time_range or kernels):
        _fail("nothing to trim by: give --flushes A:B, --time START:END or --kernels REGEX")
    try:
        flush_range = parse_range(flushes, "--flushes") if flushes else None
        window = parse_time_range(time_range, "--time") if time_range else None
    except RangeError as exc:
        _fail(str(exc))
    _check_output(output, [recording], force)
    with _load_for_analysis(recording, salvage) as source:
        rec = source.rec if hasattr(source, "rec") else source
        try:
            if rec is source:
                selection = select(rec, flush_range, window, kernels)
                keep, events = selection.events, None
            else:  # read window by window: the kept events spooled (analysis/streamed_trim.py)
                from .analysis.streamed_trim import select as select_streamed

                with _progress() as progress:
                    selection = select_streamed(source, flush_range, window, kernels, progress)
                keep, events = None, selection.events
            try:
                with write_atomically(output, [recording], force) as fh:
                    copy_recording(rec, fh, selection.flushes, selection.launches, keep, events)
            finally:
                if events is not None:
                    selection.close()
        except (TrimError, OutputError) as exc:
            _fail(str(exc))
    _say(f"{output}: {selection.describe()}")
    if rec.damage is not None:  # the format has no place for it: say it here, where the user still sees it
        _warn(
            f"{output} does not say that {recording} was damaged at byte {rec.damage.offset}: its counts may "
            "include launches whose records were lost, and it reads as complete; keep this note with it"
        )


# -- diff -----------------------------------------------------------------------------------------------


@command("[OPTIONS] A B", example="gpuobs diff before.gpuobs after.gpuobs --top 10")
def diff(
    a: Path = typer.Argument(..., metavar="A", hidden=True),
    b: Path = typer.Argument(..., metavar="B", hidden=True),
    fmt: str = typer.Option("table", "--format", metavar="FORMAT", help="table, csv or json"),
    as_json: bool = typer.Option(False, "--json", help="same as --format json"),
    top: Optional[int] = typer.Option(None, "--top", metavar="N", help="rows in the table (default 30)"),
    salvage: bool = typer.Option(False, "--salvage", help="read damaged recordings up to the damage"),
):
    """Compare recording B with A per kernel (time summary, blocks, SMs, counts, drops): B / A ratios,
    the largest regression first."""
    from .analysis.diff import command as diff_command

    diff_command(a, b, "json" if as_json else fmt, top, salvage)


# -- query ----------------------------------------------------------------------------------------


@command(
    '[OPTIONS] RECORDING "SQL"',
    example='gpuobs query run.gpuobs "SELECT kernel, count(*), sum(span_ns) FROM launches GROUP BY kernel"',
)
def query(
    recording: Path = typer.Argument(..., metavar="RECORDING", hidden=True),
    sql: str = typer.Argument(..., metavar="SQL", hidden=True),
    fmt: str = typer.Option("table", "--format", metavar="FORMAT", help="table, csv or json"),
    cache: Optional[Path] = typer.Option(
        None, "--cache", metavar="DIR", help="where the tables are kept (default RECORDING.parquet beside it)"
    ),
    refresh: bool = typer.Option(False, "--refresh", help="export the tables again even if current"),
):
    """DuckDB SQL over the recording's tables (launches, blocks, kernels, memory_samples, flushes, ...:
    docs/parquet-schema.md), exported once beside it (pip install 'gpuobs[query]')."""
    from .columnar.query import command as query_command

    query_command(recording, sql, fmt, cache, refresh)


# -- metrics --------------------------------------------------------------------------------------------


@command("[OPTIONS] [RECORDING]", example="gpuobs metrics run.gpuobs --port 9400")
def metrics(
    recording: Path = typer.Argument(DEFAULT_RECORDING, metavar="[RECORDING]", hidden=True),
    port: int = typer.Option(9400, "--port", metavar="PORT", help="serve /metrics on this port"),
    address: str = typer.Option("127.0.0.1", "--address", metavar="ADDR", help="0.0.0.0: reachable from others"),
    interval: str = typer.Option("1s", "--interval", metavar="TIME", help="how often to look for new flushes"),
    top: int = typer.Option(20, "--top", metavar="N", help="kernels named per GPU; the rest add up as 'other'"),
    once: bool = typer.Option(False, "--once", help="print the metrics once (Prometheus text format) and exit"),
):
    """Follow a recording as it grows (default ./gpuobs.gpuobs) and serve per-kernel launches, exact counts,
    drops and ring fill as Prometheus metrics (pip install 'gpuobs[metrics]')."""
    from .metrics.command import metrics_command

    metrics_command(recording, port, address, interval, top, once)


# -- build, version -----------------------------------------------------------------------------------


@command("[OPTIONS]", name="build", example="gpuobs build --force")
def build_cmd(force: bool = typer.Option(False, "--force", "-f", help="rebuild even if cached")):
    """Build the native tool and device patches (`record` does it on first use), saying what compiles."""
    from .record.native_build import NativeUnavailable, build

    try:
        b = _build_with_progress(build, force)
    except NativeUnavailable as exc:
        _fail(str(exc))
    _say(f"tool:    {b.tool}\npatches: {b.patches}\nprobe:   {b.probe}\nsanitizer: {b.sanitizer_lib}")


@command("", example="gpuobs version")
def version():
    """Print the gpuobs version."""
    _say(__version__)


def _usage_error(exc) -> None:
    """One line, as every other error: what was wrong, and where the help is."""
    if exc.ctx is not None:
        where = f"{exc.ctx.command_path} --help"
    else:  # click gives no context for an option missing its value: name the command's help from argv
        commands = typer.main.get_command(app).commands
        command = next((a for a in sys.argv[1:] if a in commands), None)
        where = f"gpuobs {command} --help" if command else "gpuobs --help"
    err.print(f"gpuobs: {one_line(exc.format_message())} (see {where})", markup=False)
    sys.exit(exc.exit_code)


def main():
    try:
        # Not standalone: click's usage errors come here, to be said in one line.
        code = app(standalone_mode=False)
    except _NO_ARGS_IS_HELP as exc:  # plain `gpuobs`: the help, as click shows it
        exc.show()
        sys.exit(exc.exit_code)
    except click_errors.UsageError as exc:
        _usage_error(exc)
    except click_errors.ClickException as exc:
        err.print(f"gpuobs: {one_line(exc.format_message())}", markup=False)
        sys.exit(exc.exit_code)
    except typer.Abort:  # Ctrl-C; outputs leave nothing behind
        err.print("Aborted!", markup=False)
        sys.exit(1)
    except BrokenPipeError:  # click's and print's writes
        _reader_left()
    except RecordingError as exc:  # read past loading (events read window by window): cut short, damaged
        _inputs_intact()
        err.print(Text.assemble(("gpuobs: ", "bold red"), one_line(exc)))
        sys.exit(2)
    except Exception as exc:  # a bug: one line for the user, the traceback on request
        _inputs_intact()
        if os.environ.get("GPUOBS_DEBUG"):
            raise
        err.print(
            Text.assemble(
                ("gpuobs: internal error: ", "bold red"),
                one_line(f"{type(exc).__name__}: {exc}") + " (please report it; GPUOBS_DEBUG=1 shows the traceback)",
            )
        )
        sys.exit(70)
    _inputs_intact()
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
