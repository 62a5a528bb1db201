"""The C scan of Kineto traces against the Python reader on mutated copies of the
shipped trace: the same trace or the same error, or the file left to Python
(a longer run, and one under ASan: benchmarks/fuzz_kineto_scan.py)."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz_kineto_scan.py"


def test_mutated_traces_read_the_same_by_the_scan_and_python():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--cases", "60", "--seed", "3"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "0 different" in proc.stdout
