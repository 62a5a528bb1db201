"""benchmarks/patch_ab.py without a GPU: its table says which cells did not run
or failed, and a run stopped by a time limit still prints what finished."""

import importlib.util
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
spec = importlib.util.spec_from_file_location("patch_ab", ROOT / "benchmarks" / "patch_ab.py")
patch_ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(patch_ab)


def test_the_table_names_cells_that_did_not_run(capsys):
    samples = {
        "none": {"a": [1.0, 1.1], "b": [2.0]},
        "base": {"a": [1.2, 1.3], "b": [2.4]},
        "v": {"a": [1.25]},
        "w": {},
    }
    totals = {"base": [{"attempted": 5}], "v": [], "w": []}
    patch_ab.print_table("block_trace", ["none", "base", "v", "w"], "base", samples, totals)
    rows = {line.split(" | ")[0][2:]: line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")}
    assert rows["a"] == "| a | 1.050 | 1.250 (1.19x) | 1.250 (1.19x; 1.000x base) | not run |"
    assert rows["b"] == "| b | 2.000 | 2.400 (1.20x) | failed | not run |"


def test_a_run_stopped_by_sigterm_prints_what_finished(monkeypatch, capsys):
    calls = []

    def run_once(args, fatbin, output):
        calls.append(fatbin)
        if len(calls) == 3:  # the time limit arrives during the third process
            signal.raise_signal(signal.SIGTERM)
        return {"w": 1.0 + len(calls) / 10}

    monkeypatch.setattr(patch_ab, "build_variants", lambda variants, workdir: {n: n for n in variants})
    monkeypatch.setattr(patch_ab, "run_once", run_once)
    monkeypatch.setattr(
        sys, "argv", ["patch_ab.py", "--mode", "block_starts", "--variant", "base=x.cu", "--variant", "v=y.cu"]
    )
    previous = signal.getsignal(signal.SIGTERM)
    try:
        patch_ab.main()
    finally:
        signal.signal(signal.SIGTERM, previous)
    out = capsys.readouterr().out
    assert "stopped before the last round ended" in out
    assert "| w | 1.100 | 1.200 (1.09x) | not run |" in out
