"""JAX on a real GPU with XLA's command buffers (CUDA graphs) off, at XLA's
defaults, and forced on for every command kind including WHILE and CONDITIONAL,
each with and without XLA_PYTHON_CLIENT_PREALLOCATE: every counted block must
belong to a listed launch (`gpuobs info --json`: counts_unattributed and
events_unattributed 0), each launch's count its own (_check_counts says how
conditional bodies and replays sharing a window are told).
The program is the issue's (jit matmul, tanh, grad) run six times, so that
command buffers are recorded, replayed and updated, plus a fori_loop and a cond.
Marked gpu; each case about 10 s. benchmarks/jax_launch_paths.py says, for a
failing case, which graph execs and which launches are behind it."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuobs.analysis import launches as analysis
from gpuobs.recording_file import schema

from .gpu_helpers import check_launch_counts, gpuobs_cli, record, run

pytestmark = pytest.mark.gpu

REPLAYED = schema.LaunchFlag.GRAPH_NODE | schema.LaunchFlag.FROM_NODE_TABLE
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from jax_launch_paths import COMMAND_BUFFERS, PROGRAM, jax_env  # noqa: E402

assert set(COMMAND_BUFFERS) == {"off", "default", "all"}


@pytest.mark.parametrize("preallocate", ["true", "false"])
@pytest.mark.parametrize("command_buffers", ["all", "default", "off"])
def test_every_counted_block_in_a_listed_launch(tmp_path, command_buffers, preallocate):
    pytest.importorskip("jax")
    env = jax_env(command_buffers, preallocate)
    if command_buffers == "all":  # flags this XLA does not know abort the program: say so, do not guess
        alone = run([sys.executable, "-c", PROGRAM], env=env)
        if alone.returncode != 0:
            pytest.skip(f"this JAX does not run with {env['XLA_FLAGS']!r}: {alone.stderr[-600:]}")
    name = f"jax_{command_buffers}_{preallocate}"
    proc, rec = record(tmp_path, "block_trace", [sys.executable, "-c", PROGRAM], name=name, env=env)
    assert "uninstrumented" not in proc.stderr, proc.stderr[-2000:]
    info = json.loads(gpuobs_cli("info", "--json", rec.path).stdout)
    replayed = int(((rec.launches["flags"] & REPLAYED) != 0).sum())
    print(name, "launches", info["launches"], "replayed nodes", replayed, "counted", info["counted"])
    assert info["complete"] and info["dropped"] == 0
    if command_buffers == "off":
        assert replayed == 0  # the flag turned command buffers off: no graph replays
    if command_buffers == "all":
        assert replayed > 0  # the flags turned them on: the test is about replays
    assert info["counts_unattributed"] == 0 and info["events_unattributed"] == 0, (
        f"{info['counts_unattributed']:,} counted blocks and {info['events_unattributed']:,} records in no listed "
        f"launch; run benchmarks/jax_launch_paths.py --case {command_buffers},{preallocate} to see which"
    )
    table = analysis.launch_table(rec)
    _check_counts(rec, table, info)


def _check_counts(rec, table, info):
    body, shared = check_launch_counts(rec, table)
    if body.any():  # the recording says which kernels and why
        assert any(n.code == "conditional_bodies" for n in rec.notices), rec.notices
    assert (
        info["counted"]
        == int(table.counted[table.counted_shared <= 1].sum())
        + int(sum(table.counted[i] // table.counted_shared[i] for i in np.flatnonzero(table.counted_shared > 1)))
        == info["attempted"]
    )
