"""`gpuobs metrics`: the command's body (cli.py declares the options)."""

from __future__ import annotations

from pathlib import Path


def metrics_command(recording: Path, port: int, address: str, interval: str, top: int, once: bool) -> None:
    from .. import cli
    from ..errors import GpuobsError

    try:
        from . import follow
    except ImportError:
        cli._fail("gpuobs metrics needs prometheus-client: pip install 'gpuobs[metrics]'")
    if top < 1:
        cli._fail(f"--top {top}: name 1 or more kernels")
    try:
        seconds = follow.wait_seconds(interval)
    except GpuobsError as exc:
        cli._fail(f"--interval: {exc}")
    if seconds <= 0:
        cli._fail(f"--interval {interval}: give a time above 0, e.g. 1s")
    if once:
        cli._check_recording_path(recording)
        try:
            cli._say(follow.exposition(recording, top).rstrip("\n"))
        except GpuobsError as exc:
            cli._fail(str(exc))
        return
    cli.err.print(
        f"gpuobs: serving the metrics of {recording} on http://{address}:{port}/metrics, "
        f"read again every {interval} as it grows (Ctrl-C stops)",
        markup=False,
    )
    try:
        follow.serve(recording, port, address, seconds, top)
    except OSError as exc:
        cli._fail(f"cannot serve on {address}:{port}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        pass
