"""What the GPU tests share: running a program under `gpuobs record`."""

import os
import signal
import subprocess
import sys

import numpy as np

import gpuobs
from gpuobs.analysis import launches as analysis
from gpuobs.recording_file import schema

# A program or a CLI step run by a test, past this, fails the test (TimeoutExpired names the
# command) instead of holding a lent GPU machine's whole call: a hang is then a result.
GPU_PROGRAM_TIMEOUT_S = 600


def run(args, **kwargs):
    """subprocess.run for a test's program or CLI step: output captured as text, and a run
    past GPU_PROGRAM_TIMEOUT_S fails the test (the one place that policy lives)."""
    return subprocess.run(args, capture_output=True, text=True, timeout=GPU_PROGRAM_TIMEOUT_S, **kwargs)


def gpuobs_cli(*args, **kwargs):
    """`python -m gpuobs ARGS` in this interpreter, run as run() runs a program."""
    return run([sys.executable, "-m", "gpuobs", *map(str, args)], **kwargs)


def record(tmp_path, mode, cmd, *extra, name=None, check=True, env=None, timeout=900):
    """Runs cmd under `gpuobs record --mode MODE [extra]`; returns the process and the
    recording (None when none was written). check: the run must exit 0. A run past
    timeout fails the test, and its whole process group is killed: a program left
    running (a kernel spinning on the GPU) would slow every later test and benchmark."""
    out = tmp_path / f"{name or mode}.gpuobs"
    args = [sys.executable, "-m", "gpuobs", "record", "--mode", mode, "-o", str(out), *extra, "--", *cmd]
    with subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    ) as p:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as late:
            os.killpg(p.pid, signal.SIGKILL)
            stdout, stderr = p.communicate()
            raise AssertionError(
                f"`gpuobs record` ran past {timeout} s and was killed; stderr:\n{stderr[-4000:]}"
            ) from late
    proc = subprocess.CompletedProcess(args, p.returncode, stdout, stderr)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc, (gpuobs.load(out) if out.exists() else None)


def launches_named(rec, pattern):
    """Rows of rec.launches whose function name contains pattern."""
    return [i for i, launch in enumerate(rec.launches) if pattern in rec.launch_function(launch).name]


def assert_windows_add_up(rec):
    """Every flush window: what was recorded and what was dropped make what was attempted."""
    f = rec.flushes
    assert (f["recorded"] + f["dropped"] == f["attempted"]).all()


def check_launch_counts(rec, table):
    """Each launch's count is its own: its grid (block_trace counts and records every
    block); a kernel inside a conditional node's body (listed once per replay) a whole
    number of runs of its grid, its records as many; a count shared only by replays of
    one node in one flush window (one grid id: the counter cannot tell them apart), the
    sum of their grids. Block ends stamped by a later run are flagged, and only where
    one grid id ran more than once in a window."""
    flags = rec.launches["flags"]
    body = (flags & schema.LaunchFlag.CONDITIONAL_BODY) != 0
    runs = analysis.conditional_runs(rec, table)
    grid = table.grid_blocks
    alone = table.counted_shared == 1
    bad_body = np.flatnonzero(
        body
        & (
            (alone & ((runs < 0) | (table.blocks_recorded != table.counted)))
            | (table.counted % np.maximum(grid, 1) != 0)
        )
    )
    assert len(bad_body) == 0, [
        (table.name[i][:60], int(grid[i]), int(table.counted[i]), int(table.blocks_recorded[i])) for i in bad_body[:10]
    ]
    key = rec.launch_flushes.astype(np.int64) * (1 << 40) + rec.launches["grid_id"].astype(np.int64)
    _, where, same_window = np.unique(key, return_inverse=True, return_counts=True)
    repeats = same_window[where]  # launches of this grid id in this launch's window
    plain = ~body
    exact = plain & (table.counted_shared == 1)
    shared = plain & (table.counted_shared > 1)
    wrong = np.flatnonzero(exact & ((table.counted != grid) | (table.blocks_recorded != grid)))
    wrong = np.union1d(
        wrong, np.flatnonzero(shared & ((table.counted_shared != repeats) | (table.counted != repeats * grid)))
    )
    wrong = np.union1d(wrong, np.flatnonzero(plain & (table.counted < 0)))
    assert len(wrong) == 0, [
        (table.name[i][:60], int(grid[i]), int(table.counted[i]), int(table.counted_shared[i]), int(repeats[i]))
        for i in wrong[:10]
    ]
    late = table.ends_unconfirmed > 0
    print(
        "conditional-body launches",
        int(body.sum()),
        "runs",
        np.unique(runs[body]).tolist(),
        "shared by replays of one node",
        int(shared.sum()),
        "ends flagged late",
        int(table.ends_unconfirmed.sum()),
    )
    # A later launch of the same grid id stamps an earlier block's end when its exits
    # run before its leader publishes and the earlier event is still in the block
    # table: in the same window, or in the next one before the drain copies the
    # earlier event (the drain runs behind the cut). On the H100, 2026-12-06, XLA's
    # command buffers (all, preallocated) flagged ends of a node whose grid id ran once
    # in its window, failing a check held to the window. So: late ends only on grid
    # ids that ran more than once in the recording (not yet re-run on a GPU).
    _, where_all, same_grid = np.unique(rec.launches["grid_id"], return_inverse=True, return_counts=True)
    ran_again = same_grid[where_all] > 1
    assert not (late & ~body & ~ran_again).any(), [
        table.name[i][:60] for i in np.flatnonzero(late & ~body & ~ran_again)[:10]
    ]
    return body, shared


def exit_flags_match_counts(rec):
    """Block events' exit counts against their threads, and the tool's flags for them:
    more exits than threads flagged END_UNCONFIRMED (another run of the grid id stamped
    it), fewer flagged EARLY_EXITS and only those. Returns (events, missing exits per
    event, over, early)."""
    ev = rec.events[rec.events["kind"] == schema.EventKind.BLOCK]
    missing = ev["thread_index"].astype(np.int64) - ev["exit_count"].astype(np.int64)
    over = (ev["flags"] & schema.BLOCK_END_UNCONFIRMED).astype(bool)
    early = (ev["flags"] & schema.BLOCK_EARLY_EXITS).astype(bool)
    assert (over >= (missing < 0)).all() and (early == (missing > 0)).all()
    return ev, missing, over, early


def ends_past_next_run(ev: np.ndarray, grids=None) -> np.ndarray:
    """Per event of one flush window: a block end later than the start of the same
    block's next run of its grid id (tool/late_ends.h's rule, in numpy); `grids`:
    only these grid ids (all when None)."""
    late = np.zeros(len(ev), bool)
    rows = np.flatnonzero((ev["kind"] == schema.EventKind.BLOCK) & (ev["time_end"] != 0))
    if grids is not None:
        rows = rows[np.isin(ev["grid_id"][rows], np.asarray(sorted(grids), np.uint64))]
    e = ev[rows]
    order = np.lexsort((e["time_start"], e["block_z"], e["block_y"], e["block_x"], e["grid_id"]))
    e, rows = e[order], rows[order]
    same = e["grid_id"][1:] == e["grid_id"][:-1]
    for axis in ("block_x", "block_y", "block_z"):
        same &= e[axis][1:] == e[axis][:-1]
    late[rows[:-1][same & (e["time_end"][:-1] > e["time_start"][1:])]] = True
    return late
