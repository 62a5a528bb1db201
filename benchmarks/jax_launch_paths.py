"""Which launches of a JAX program gpuobs cannot attribute, and through which path
they ran: for finding the cause by instrumenting, not guessing (issue 37).

Runs the program of tests/test_gpu_jax.py under `gpuobs record --mode block_trace
--api-trace` with GPUOBS_DEBUG=1, for each case (command buffers off / XLA default /
all, preallocation true / false), and prints per case:

* the tool's GPUOBS_DEBUG lines about graph execs: created (and whether learned
  at their first replay, or kept on node callbacks for conditional nodes or device
  launch), learned (kernel nodes, grid ids), sent back to learning (by which driver
  call), replayed without having been seen created, destroyed;
* the CUDA API calls that build, change and launch graphs, and that launch
  kernels (the recording's API trace), counted by name;
* launches listed: plain, graph nodes by callback, graph nodes from a learned
  table, and graph replays;
* what belongs to no listed launch: records by kernel and grid id (launches the
  tool never saw), counted blocks per flush window, launches whose device count
  differs from their grid (a kernel run more often than it was listed: a WHILE
  body, a conditional node), and block ends stamped by a later replay, by kernel.

Run on the GPU machine (about 15 s a case):
    GPUOBS_DEBUG=1 python3 benchmarks/jax_launch_paths.py --out $OUT/jax_paths
    python3 benchmarks/jax_launch_paths.py --case all,false --xla-dump   # one case, with XLA's HLO dump
A JSON of the same is written beside the recordings."""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

import gpuobs
from gpuobs.analysis import launches as analysis
from gpuobs.recording_file import schema

# The program tests/test_gpu_jax.py records: the (jit matmul, tanh, grad) six
# times, so that command buffers are recorded, replayed and updated, plus a fori_loop and a cond.
PROGRAM = """
import jax, jax.numpy as jnp
from jax import lax
x = jnp.ones((512, 512), jnp.float32) * 0.01
f = jax.jit(lambda a: jnp.tanh(a @ a))
g = jax.jit(jax.grad(lambda a: jnp.sum(jnp.tanh(a @ a))))
h = jax.jit(lambda a: lax.fori_loop(0, 4, lambda i, b: jnp.tanh(b @ b) * 0.5 + b, a))
c = jax.jit(lambda a, p: lax.cond(p, lambda b: jnp.tanh(b), lambda b: b @ b, a))
for step in range(6):
    jax.block_until_ready((f(x), g(x + step), h(x), c(x, step % 2 == 0)))
print(jax.devices())
"""
# XLA_FLAGS per case; None: XLA's own defaults. "all" also drops the smallest-graph
# threshold, so that this small program's every sequence becomes a command buffer.
COMMAND_BUFFERS = {
    "off": "--xla_gpu_enable_command_buffer=",
    "default": None,
    "all": "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,CONDITIONAL,WHILE "
    "--xla_gpu_graph_min_graph_size=1",
}


def jax_env(command_buffers: str, preallocate: str) -> dict:
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE=preallocate)
    env.pop("XLA_FLAGS", None)
    if COMMAND_BUFFERS[command_buffers] is not None:
        env["XLA_FLAGS"] = COMMAND_BUFFERS[command_buffers]
    return env


GRAPH_LINE = re.compile(r"^gpuobs: (graph exec .*)$")
PATH_APIS = re.compile(r"Graph|Capture|Launch|Conditional")


def debug_lines(stderr: str) -> dict:
    """The tool's graph exec lines, grouped by what happened."""
    kinds = collections.defaultdict(list)
    for line in stderr.splitlines():
        m = GRAPH_LINE.match(line.strip())
        if not m:
            continue
        text = m.group(1)
        for kind in ("never seen", "created", "learned", "update", "change", "destroyed"):
            if kind in text:
                kinds[kind].append(text)
                break
        else:
            kinds["other"].append(text)
    return dict(kinds)


def api_counts(rec) -> dict:
    if len(rec.api_calls) == 0:
        return {}
    ids, counts = np.unique(rec.api_calls["api_id"], return_counts=True)
    out = {}
    for api_id, n in zip(ids.tolist(), counts.tolist()):
        name = rec.api_names.get(api_id, f"api#{api_id}")
        if PATH_APIS.search(name):
            out[name] = out.get(name, 0) + n
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def unattributed(rec) -> dict:
    of = analysis.launch_index_of_events(rec)
    ev = rec.events
    lost = np.flatnonzero(of < 0)
    by_kernel = collections.Counter()
    devices = rec.event_devices
    for i in lost.tolist():
        name = rec.function(int(devices[i]), int(ev["function_slot"][i])).name
        by_kernel[(name[:80], int(ev["grid_id"][i]))] += 1
    table = analysis.launch_table(rec, of)
    body = (rec.launches["flags"] & schema.LaunchFlag.CONDITIONAL_BODY) != 0
    # Kernels in conditional bodies count all their runs (listed once a replay): apart.
    off = np.flatnonzero((table.counted >= 0) & (table.counted != table.grid_blocks) & ~body)
    repeated = collections.Counter()
    for i in off.tolist():
        ratio = int(table.counted[i]) / max(int(table.grid_blocks[i]), 1)
        key = (table.name[i][:80], round(ratio, 2), int(rec.launches["flags"][i]), int(table.counted_shared[i]))
        repeated[key] += 1
    runs = analysis.conditional_runs(rec, table)
    bodies = collections.Counter()
    for i in np.flatnonzero(body).tolist():
        bodies[(table.name[i][:80], int(runs[i]))] += 1
    late = collections.Counter()
    for i in np.flatnonzero(table.ends_unconfirmed > 0).tolist():
        late[table.name[i][:80]] += int(table.ends_unconfirmed[i])
    f = rec.flushes
    return {
        "records_of_no_launch": [{"kernel": k, "grid_id": g, "records": n} for (k, g), n in by_kernel.most_common(20)],
        "records_of_no_launch_total": int(len(lost)),
        "counted_of_no_launch_per_window": [
            {"flush": int(s), "device": int(d), "blocks": int(u)}
            for s, d, u in zip(f["flush_seq"], f["device_index"], f["unattributed"])
            if u
        ][:20],
        "counted_of_no_launch_total": int(f["unattributed"].sum()) if len(f) else 0,
        "count_not_grid": [
            {"kernel": k, "counted_over_grid": r, "flags": fl, "shared_by": sh, "launches": n}
            for (k, r, fl, sh), n in repeated.most_common(20)
        ],
        "conditional_bodies": [
            {"kernel": k, "runs_per_replay": r, "launches": n} for (k, r), n in bodies.most_common(20)
        ],
        "notices": [f"{n.code}: {n.text[:300]}" for n in rec.notices],
        "ends_stamped_later_by_kernel": dict(late.most_common(20)),
    }


def listed(rec) -> dict:
    flags = rec.launches["flags"]
    node = (flags & schema.LaunchFlag.GRAPH_NODE) != 0
    table = (flags & schema.LaunchFlag.FROM_NODE_TABLE) != 0
    return {
        "launches": int(len(flags)),
        "plain": int((~node).sum()),
        "graph_nodes_by_callback": int((node & ~table).sum()),
        "graph_nodes_from_table": int(table.sum()),
        "graph_replays": int(len(np.unique(rec.launches["graph_launch_id"][node]))),
        "raced_flush": int(((flags & schema.LaunchFlag.RACED_FLUSH) != 0).sum()),
        "flush_windows": int(len(rec.flushes)),
    }


def run_case(out: Path, command_buffers: str, preallocate: str, xla_dump: bool) -> dict:
    env = jax_env(command_buffers, preallocate)
    env["GPUOBS_DEBUG"] = "1"
    name = f"jax_{command_buffers}_{preallocate}"
    if xla_dump:
        dump = out / f"{name}_xla"
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_dump_to={dump} --xla_dump_hlo_as_text".strip()
    path = out / f"{name}.gpuobs"
    cmd = [sys.executable, "-m", "gpuobs", "record", "--mode", "block_trace", "--api-trace", "-f", "-o", str(path)]
    proc = subprocess.run([*cmd, "--", sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env)
    (out / f"{name}.stderr.txt").write_text(proc.stderr)
    result = {"case": name, "xla_flags": env.get("XLA_FLAGS"), "returncode": proc.returncode}
    if not path.exists():
        result["error"] = proc.stderr[-2000:]
        return result
    rec = gpuobs.load(path)
    result.update(
        debug=debug_lines(proc.stderr), api=api_counts(rec), listed=listed(rec), unattributed=unattributed(rec)
    )
    return result


def show(r: dict) -> None:
    print(f"== {r['case']}  XLA_FLAGS={r['xla_flags']!r}  exit {r['returncode']}")
    if "error" in r:
        print("  no recording:", r["error"])
        return
    print("  listed:", r["listed"])
    for kind, lines in r["debug"].items():
        print(f"  graph exec {kind}: {len(lines)}")
        for line in lines[:6]:
            print("     ", line)
    print("  API calls (graphs, captures, launches):", r["api"])
    u = r["unattributed"]
    print(f"  records of no listed launch: {u['records_of_no_launch_total']:,}")
    for row in u["records_of_no_launch"]:
        print("     ", row)
    print(
        f"  counted blocks of no listed launch: {u['counted_of_no_launch_total']:,}",
        u["counted_of_no_launch_per_window"],
    )
    print("  launches whose count is not their grid (conditional bodies apart):", u["count_not_grid"])
    print("  kernels in conditional bodies (runs per replay: counted / grid):", u["conditional_bodies"])
    for note in u["notices"]:
        print("  notice:", note)
    print("  ends stamped by a later replay, by kernel:", u["ends_stamped_later_by_kernel"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "jax_launch_paths")
    ap.add_argument(
        "--case",
        action="append",
        help="COMMAND_BUFFERS,PREALLOCATE (e.g. all,false); repeatable; default: every one",
    )
    ap.add_argument("--xla-dump", action="store_true", help="also dump XLA's HLO (which ops became command buffers)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cases = (
        [tuple(c.split(",")) for c in args.case]
        if args.case
        else [(cb, pre) for cb in COMMAND_BUFFERS for pre in ("true", "false")]
    )
    results = []
    for command_buffers, preallocate in cases:
        r = run_case(args.out, command_buffers, preallocate, args.xla_dump)
        show(r)
        results.append(r)
    (args.out / "jax_launch_paths.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
