"""benchmarks/flush_accounting.py on a real recording (tests/data/while_graph_block_trace.gpuobs,
H100): every flush adds up; with blocks moved from one flush's count to the next (what a
snapshot window merged into a later one did on the GPU), exactly those two flushes are
apart, by opposite amounts, and the script says so and exits 1."""

import subprocess
import sys
from pathlib import Path

import gpuobs

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "flush_accounting.py"
WHILE_GRAPH = ROOT / "tests" / "data" / "while_graph_block_trace.gpuobs"

sys.path.insert(0, str(ROOT / "benchmarks"))
import flush_accounting  # noqa: E402


def test_a_real_recording_adds_up_in_every_flush():
    proc = subprocess.run([sys.executable, str(SCRIPT), str(WHILE_GRAPH)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 apart" in proc.stdout


def test_blocks_counted_in_the_wrong_flush_are_found_and_explained():
    rec = gpuobs.load(WHILE_GRAPH)
    counts = rec.launch_counts.copy()
    first = (counts["flush_seq"] == 0) & (counts["grid_id"] == 7)  # one slot, alone in flush 0
    later = (counts["flush_seq"] == 1) & (counts["grid_id"] == 7)  # the same node's slot in flush 1, shared by 3
    counts["count"][first] += 40
    counts["count"][later] -= 40
    rec.launch_counts = counts
    apart = flush_accounting.apart_flushes(rec)
    assert apart == {(0, 0): 40, (0, 1): -40}
    text = "\n".join(flush_accounting.explain(rec, (0, 0), 40))
    assert "flush 0 (device 0): counted - (attempted + sampled out) = +40" in text
    assert "7: (520, 1)" in text  # the moved count beside its records and the next flush's row
