"""JAX on a real GPU with XLA's command buffers (CUDA graphs) off, at XLA's
defaults, and forced on for every command kind including WHILE and CONDITIONAL,
each with and without XLA_PYTHON_CLIENT_PREALLOCATE: every counted block must
belong to a listed launch (`gpuobs info --json`: counts_unattributed and
events_unattributed 0), no block end stamped by a later replay, counts exact.
The program is the issue's (jit matmul, tanh, grad) run six times, so that
command buffers are recorded, replayed and updated, plus a fori_loop and a cond.
Marked gpu; each case about 10 s. benchmarks/jax_launch_paths.py says, for a
failing case, which graph execs and which launches are behind it."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpuobs.analysis import launches as analysis
from gpuobs.recording_file import schema

from .gpu_helpers import record

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
        alone = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env)
        if alone.returncode != 0:
            pytest.skip(f"this JAX does not run with {env['XLA_FLAGS']!r}: {alone.stderr[-600:]}")
    name = f"jax_{command_buffers}_{preallocate}"
    proc, rec = record(tmp_path, "block_trace", [sys.executable, "-c", PROGRAM], name=name, env=env)
    assert "uninstrumented" not in proc.stderr, proc.stderr[-2000:]
    info = json.loads(
        subprocess.run(
            [sys.executable, "-m", "gpuobs", "info", "--json", str(rec.path)], capture_output=True, text=True
        ).stdout
    )
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
    assert info["unconfirmed_ends"] == 0
    table = analysis.launch_table(rec)
    exact = table.counted_shared == 1
    assert exact.all()
    wrong = np.flatnonzero((table.counted != table.grid_blocks) | (table.blocks_recorded != table.grid_blocks))
    assert len(wrong) == 0, [
        (table.name[i][:60], int(table.grid_blocks[i]), int(table.counted[i]), int(table.blocks_recorded[i]))
        for i in wrong[:10]
    ]
    assert info["counted"] == int(table.counted.sum()) == info["attempted"]
