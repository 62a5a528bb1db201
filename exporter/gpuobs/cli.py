"""The `gpuobs` command."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from . import __version__
from .errors import RecordingError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Record what every thread block of every CUDA kernel did, and view it in Perfetto.")
err = Console(stderr=True)
out = Console()


def _fail(message: str, code: int = 2):
    err.print(f"[bold red]gpuobs:[/] {message}", highlight=False)
    raise typer.Exit(code)


def _load(path: Path, salvage: bool):
    from .recording_file.reader import load
    try:
        rec = load(path, salvage=salvage)
    except RecordingError as exc:
        hint = "" if salvage else " (use --salvage to keep every complete chunk before the damage)"
        _fail(f"{exc}{hint}")
    if rec.damage is not None:
        err.print(f"[yellow]gpuobs:[/] {path}: damaged at byte {rec.damage.offset} ({rec.damage.reason}); "
                  f"kept everything before it, lost {rec.damage.bytes_lost} bytes", highlight=False)
    return rec


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def record(
    ctx: typer.Context,
    mode: str = typer.Option("block_trace", "--mode", "-m",
                             help="off | block_noop | block_counter | block_trace | block_trace_noop | mem_noop | "
                                  "mem_sampled | mem_full"),
    sample_shift: int = typer.Option(10, "--sample-shift", help="mem_sampled keeps 1 access in 2^N (0..32)"),
    capacity: int = typer.Option(1 << 20, "--capacity", help="event records per CUDA context (64 B each)"),
    kernels: str = typer.Option("", "--kernels", help="keep only events of kernels whose name matches this regex"),
    output: Path = typer.Option(Path("gpuobs.gpuobs"), "-o", "--output", help="recording to write"),
    scope: str = typer.Option("function", "--scope", help="callback data scope: function (graph-safe) or launch"),
    api_trace: bool = typer.Option(False, "--api-trace",
                                   help="also record CUDA driver and runtime API calls (host clock, thread)"),
    graph_nodes: bool = typer.Option(True, "--graph-nodes/--no-graph-nodes",
                                     help="list each kernel of every CUDA-graph replay as a launch (costs per-node "
                                          "callbacks; without, replayed blocks are recorded but not tied to launches)"),
    paused: bool = typer.Option(False, "--paused",
                                help="start with nothing patched: the program records only between its own "
                                     "gpuobs.resume() and gpuobs.pause() calls (or `with gpuobs.window():`)"),
    window_every: int = typer.Option(0, "--window-every", metavar="N",
                                     help="record 1 interval in N, an interval ending where the program "
                                          "synchronises with nothing left running; the others run unpatched, "
                                          "their launches only counted"),
    force: bool = typer.Option(False, "--force", "-f", help="overwrite an existing recording"),
):
    """Run a program with every kernel patched: gpuobs record [OPTIONS] -- CMD [ARGS...]"""
    from .record.native_build import NativeUnavailable, build
    from .record.run import RecordOptions, child_recordings, mode_names, outputs_of_run, run_recorded, tool_environment

    cmd = list(ctx.args)
    if not cmd:
        _fail("no program to run: gpuobs record [OPTIONS] -- CMD [ARGS...]")
    if mode not in mode_names():
        _fail(f"--mode {mode!r} is not one of {', '.join(mode_names())}")
    if not 0 <= sample_shift <= 32:
        _fail(f"--sample-shift {sample_shift} is outside 0..32")
    if not 1024 <= capacity <= 1 << 28:
        _fail(f"--capacity {capacity} is outside 1024..{1 << 28}")
    if scope not in ("function", "launch"):
        _fail(f"--scope {scope!r} is not function or launch")
    if not 0 <= window_every <= 1 << 30:
        _fail(f"--window-every {window_every} is outside 0..{1 << 30}")
    if window_every and not graph_nodes:
        _fail("--window-every needs graph node callbacks: without them a graph replay may still run where a "
              "window turns (drop --no-graph-nodes)")
    stale = ([output] if output.exists() else []) + child_recordings(output)
    if stale and not force:
        _fail(f"{', '.join(map(str, stale))} exist(s) from an earlier run; pass --force to replace them, "
              "or -o to write elsewhere")
    if not output.parent.exists():
        _fail(f"cannot write {output}: folder {output.parent} does not exist")
    try:
        native = build()
    except NativeUnavailable as exc:
        _fail(str(exc))
    for path in stale:  # an earlier run's files must not mix into this run's export
        path.unlink()
    opts = RecordOptions(mode=mode, sample_shift=sample_shift, capacity=capacity, kernels=kernels,
                         output=output, scope=scope, api_trace=api_trace,
                         graph_nodes=graph_nodes, paused=paused, window_every=window_every)
    started = time.time()
    code = run_recorded(cmd, tool_environment(native, opts))
    files = outputs_of_run(output, started)
    if not files:
        err.print("[yellow]gpuobs:[/] the program wrote no recording (did it use CUDA? see 'gpuobs:' lines above)")
    for path in files:
        _print_summary(path)
    if code != 0:
        err.print(f"gpuobs: the program exited with status {code}", highlight=False)
    raise typer.Exit(code)


def _print_summary(path: Path) -> None:
    from .analysis.launches import summary
    from .recording_file.reader import load
    try:
        rec = load(path, salvage=True)
    except RecordingError as exc:
        err.print(f"gpuobs: {exc}")
        return
    s = summary(rec)
    dmg = f", damaged tail at byte {rec.damage.offset}" if rec.damage else ""
    err.print(
        f"gpuobs: {path}: {s['mode']}, {s['launches']} launches of {s['functions']} kernels, "
        f"{s['modules_patched']} modules patched ({s['modules_failed']} failed"
        + (f", {s['modules_deferred']} loaded while paused, patched at their first window" if s["modules_deferred"]
           else "") + "); "
        f"counted {s['counted']:,}; events kept {s['block_events'] + s['memory_events']:,}; "
        f"attempted {s['attempted']:,} = recorded {s['recorded']:,} + dropped {s['dropped']:,}"
        f"{dmg}{'' if s['complete'] else ', run did not close cleanly'}"
        + (f"; {s['unconfirmed_ends']:,} block ends stamped by a later replay (flagged)" if s["unconfirmed_ends"] else "")
        + (f"; {len(rec.api_calls):,} CUDA API calls" if len(rec.api_calls) else "")
        + (f"; {s['unrecorded_launches']:,} launches ran outside recording windows (unpatched, not in the trace)"
           if s["unrecorded_launches"] else "")
        + (f"; {s['device_launches']:,} of the launches were made by kernels (dynamic parallelism)"
           if s["device_launches"] else ""),
        highlight=False,
    )
    # What the tool could not record, said once more after the program's own output.
    for note in s["notices"]:
        err.print(f"gpuobs: {path}: {'NOTHING WAS RECORDED: ' if s['launches'] == 0 else ''}{note}",
                  highlight=False, markup=False)


@app.command()
def info(recording: Path = typer.Argument(Path("gpuobs.gpuobs")),
         salvage: bool = typer.Option(False, "--salvage", help="keep what precedes damage"),
         as_json: bool = typer.Option(False, "--json")):
    """A recording's summary: mode, launches, counts, drops."""
    from .analysis.launches import summary
    rec = _load(recording, salvage)
    s = summary(rec)
    if as_json:
        out.print_json(json.dumps(s))
        return
    for key, value in s.items():
        out.print(f"{key:>16}: {value:,}" if isinstance(value, int) and not isinstance(value, bool)
                  else f"{key:>16}: {value}", highlight=False)


def _default_inputs() -> List[Path]:
    """What `gpuobs record` writes by default here: gpuobs.gpuobs and its child processes' files."""
    from .record.run import child_recordings
    main = Path("gpuobs.gpuobs")
    return ([main] if main.exists() else []) + child_recordings(main)


@app.command()
def export(
    output: Path = typer.Argument(..., help="the Perfetto trace to write (.pftrace)"),
    inputs: Optional[List[Path]] = typer.Option(None, "-i", "--input",
                                                help="recordings to read (default: ./gpuobs.gpuobs and its children's)"),
    kernels: Optional[str] = typer.Option(None, "--kernels", help="only kernels whose name matches this regex"),
    launches: Optional[str] = typer.Option(None, "--launches", help="launch ids START:END (END excluded)"),
    time_window: Optional[str] = typer.Option(None, "--time-window",
                                              help="START:END from the first event, e.g. 1ms:5ms"),
    clock: str = typer.Option("auto", "--clock",
                              help="auto: relate each GPU clock to host clocks where measured; device: never"),
    samples: bool = typer.Option(False, "--samples", help="also write each sampled memory access as an instant"),
    block_args: bool = typer.Option(True, "--block-args/--no-block-args",
                                    help="block coordinates and launch id on every block slice"),
    salvage: bool = typer.Option(False, "--salvage", help="read damaged recordings up to the damage"),
    host: Optional[List[Path]] = typer.Option(None, "--host",
                                              help="a separate, uninstrumented run's trace: PyTorch-profiler JSON, or "
                                                   "an Nsight Systems SQLite export (nsys export --type sqlite)"),
    align: Optional[str] = typer.Option(None, "--align",
                                        help="'kernels': shift --host traces so matched kernels line up (labelled)"),
    archive: bool = typer.Option(False, "--archive",
                                 help="OUTPUT is a ZIP: the gpuobs trace plus the untouched --host files and a "
                                      "perfetto_manifest relating them (Perfetto v58+ opens it as one trace)"),
):
    """Write recordings as one Perfetto trace: per GPU a device-clock group, kernels, one track per SM."""
    from .host_traces.kineto import HostTraceError
    from .host_traces.nsys import load_host_trace
    from .perfetto_export.export import ExportError, ExportOptions, export as run_export

    paths = list(inputs) if inputs else _default_inputs()
    if not paths:
        _fail("no recording: ./gpuobs.gpuobs does not exist (run `gpuobs record` here first, or pass -i FILE)")
    for p in paths:
        if not p.exists():
            _fail(f"no recording at {p}")
    if output.exists() and output.is_dir():
        _fail(f"cannot write {output}: it is a folder")
    if not output.parent.exists():
        _fail(f"cannot write {output}: folder {output.parent} does not exist")
    recordings = [_load(p, salvage) for p in paths]
    try:
        hosts = [load_host_trace(h) for h in host or []]
    except HostTraceError as exc:
        _fail(str(exc))
    if archive and not hosts:
        _fail("--archive packs --host traces beside the gpuobs trace: pass at least one --host")
    opts = ExportOptions(kernels=kernels, launches=launches, time_window=time_window, clock=clock,
                         samples=samples, block_args=block_args, align=align, host_tracks=not archive)
    trace_path = output.with_name(output.name + ".pftrace.tmp") if archive else output
    big = sum(len(r.events) for r in recordings) > 200_000
    try:
        if big:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
            with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                          console=err, transient=True) as bar:
                task = bar.add_task("exporting", total=None)
                summary = run_export(recordings, trace_path, opts, lambda m: bar.update(task, description=m), hosts)
        else:
            summary = run_export(recordings, trace_path, opts, hosts=hosts)
        if archive:
            from .perfetto_export.archive import write_archive
            summary.bytes = write_archive(output, trace_path, hosts, summary.hosts, summary.clock_related)
    except ExportError as exc:
        _fail(str(exc))
    finally:
        if archive and trace_path.exists():
            trace_path.unlink()
    _print_export_summary(summary, output)


def _print_export_summary(summary, output: Path) -> None:
    out.print(f"[bold]{output}[/]: {summary.bytes / 1e6:.1f} MB, {summary.tracks:,} tracks, "
              f"{summary.block_slices:,} block slices, {summary.kernel_slices:,} kernel slices")
    for g in summary.gpus:
        drops = f"[bold red]{g.dropped:,} records dropped[/]" if g.dropped else "nothing dropped"
        out.print(f"  {g.label}: {g.sms} SMs ({g.lanes} lanes), {g.block_slices:,} blocks, "
                  f"{g.kernel_slices:,} kernels, {g.memory_events:,} memory samples "
                  f"({g.accesses_counted:,} accesses counted), {drops}; clock: {g.clock}", highlight=False)
        if g.unrecorded_launches:
            out.print(f"    {g.unrecorded_launches:,} launches ran outside recording windows: unpatched, not in the "
                      "trace", highlight=False)
        if g.launches_without_time:
            out.print(f"    {g.launches_without_time:,} launches carry no device timestamps in this mode "
                      "(counts only), so they have no kernel slice", highlight=False)
    for a in summary.api:
        if a.shown:
            out.print(f"  CUDA API calls of pid {a.pid}: {a.calls:,} calls on {a.threads} threads, host clock; "
                      f"{a.flows:,} flows to kernel slices", highlight=False)
        else:
            out.print(f"  CUDA API calls of pid {a.pid}: {a.calls:,} recorded, not shown: {a.why_not}", highlight=False)
    for h in summary.hosts:
        shift = (f"; shifted {h.shift_ns / 1e6:+.3f} ms to line up kernels (residual {h.residual_ns / 1e3:.1f} us)"
                 if h.shift_ns else "")
        out.print(f"  host trace {h.path}: {h.events:,} events, {h.matched:,} of {h.kernels:,} kernels "
                  f"matched ({h.unmatched_gpuobs:,} gpuobs launches unmatched); clock {h.clock}{shift}",
                  highlight=False)
        if h.before_boot:
            out.print(f"  warning: {h.before_boot:,} of its {h.events:,} events fall before the recording "
                      "machine's boot on its REALTIME clock (a run from an earlier boot or another machine); "
                      "Perfetto drops them. Add --align kernels to place the run by its kernels.", highlight=False)
        for row in h.per_kernel[:8]:
            out.print(f"    {row['kernel'][:70]}: {row['matched']} matched, uninstrumented {row['uninstrumented_us']:.1f} us, "
                      f"instrumented {row['instrumented_us']:.1f} us ({row['ratio']:.2f}x)", highlight=False)
    out.print("Open it at ui.perfetto.dev, or in trace_processor.", highlight=False)


@app.command()
def stats(recording: Path = typer.Argument(Path("gpuobs.gpuobs")),
          as_json: bool = typer.Option(False, "--json", help="machine-readable rows"),
          top: int = typer.Option(30, "--top", help="kernels shown in the table"),
          salvage: bool = typer.Option(False, "--salvage")):
    """Per kernel: launches, blocks, SMs touched, block-duration percentiles, exact counts, drops."""
    from rich.table import Table
    from .analysis.launches import kernel_stats
    rows = kernel_stats(_load(recording, salvage))
    if as_json:
        out.print_json(json.dumps(rows))
        return
    table = Table(title=f"{recording}: {len(rows)} kernels", title_justify="left")
    for col in ("kernel", "launches", "blocks", "SMs", "p50 us", "p99 us", "counted", "mem events", "dropped"):
        table.add_column(col, justify="left" if col == "kernel" else "right", overflow="ellipsis",
                         max_width=60 if col == "kernel" else None, no_wrap=True)
    us = lambda v: "-" if v is None else f"{v / 1e3:.1f}"  # noqa: E731
    for r in rows[:top]:
        table.add_row(r["kernel"], f"{r['launches']:,}", f"{r['blocks_recorded']:,}/{r['blocks']:,}", str(r["sms"]),
                      us(r["block_ns_p50"]), us(r["block_ns_p99"]), f"{r['counted']:,}", f"{r['memory_events']:,}",
                      f"{r['blocks_dropped']:,}")
    out.print(table)


@app.command(name="plot")
def plot_cmd(recording: Path = typer.Argument(Path("gpuobs.gpuobs")),
             output: Path = typer.Option(Path("gpuobs.png"), "-o", "--output", help="PNG to write"),
             salvage: bool = typer.Option(False, "--salvage")):
    """SM x time occupancy heatmap and block-duration histograms (needs matplotlib)."""
    from .analysis.plot import PlotUnavailable, plot
    rec = _load(recording, salvage)
    try:
        written = plot(rec, output)
    except PlotUnavailable as exc:
        _fail(str(exc))
    if not written:
        _fail(f"{recording} holds no block events to plot (record with --mode block_trace)")
    for path in written:
        out.print(f"wrote {path}", highlight=False)


@app.command()
def trim(recording: Path = typer.Argument(..., help="recording to read"),
         output: Path = typer.Argument(..., help="recording to write"),
         flushes: str = typer.Option(..., "--flushes", help="flush windows START:END to keep (END excluded)"),
         salvage: bool = typer.Option(False, "--salvage")):
    """Copy part of a recording (whole flush windows), e.g. to share the interesting part."""
    from .ranges import RangeError, parse_range
    from .recording_file.recording_writer import copy_recording
    if output.resolve() == recording.resolve():
        _fail("trim writes a new file: give an output other than the input")
    try:
        window = parse_range(flushes, "--flushes")
    except RangeError as exc:
        _fail(str(exc))
    copy_recording(_load(recording, salvage), output, window)
    kept = _load(output, False)
    out.print(f"{output}: {len(kept.flushes)} flush windows, {len(kept.launches):,} launches, "
              f"{len(kept.events):,} events", highlight=False)


@app.command(name="build")
def build_cmd(force: bool = typer.Option(False, "--force", help="rebuild even if cached")):
    """Build the native tool and device patches (done on demand by `record`)."""
    from .record.native_build import NativeUnavailable, build
    try:
        b = build(force=force)
    except NativeUnavailable as exc:
        _fail(str(exc))
    out.print(f"tool:    {b.tool}\npatches: {b.patches}\nprobe:   {b.probe}\nsanitizer: {b.sanitizer_lib}",
              highlight=False)


@app.command()
def version():
    """Print the gpuobs version."""
    out.print(__version__)


def main():
    app()


if __name__ == "__main__":
    main()
