"""`--capacity N` keeps at least N records per context (issue 37): each SM's ring is a
power of two, N over the rings rounded up (tool/ring_capacity.h, compiled here), and
`gpuobs info` says what was kept with the same rule (analysis/ring_capacity.py)."""

import json
import os
import subprocess
import sys

from gpuobs.analysis import ring_capacity
from gpuobs.record.options import OPTIONS
from gpuobs.recording_file import schema, synthetic

from .native_helpers import compile_check

CASES = [
    (1 << 20, 132),
    (1 << 20, 128),
    (1024, 132),
    (1024, 1),
    (1000, 3),
    (540_672, 132),
    (OPTIONS["capacity"].hi, 132),
]
CASES += [(n, s) for n in (1023, 4097, 123_457, 7_000_001) for s in (1, 7, 78, 108, 114, 132, 144, 256)]


def test_the_tool_keeps_at_least_what_was_asked_and_info_says_the_same(tmp_path):
    exe = compile_check(tmp_path / "ring_capacity_check", "ring_capacity_check.cpp")
    lines = "".join(f"{n} {s}\n" for n, s in CASES)
    out = subprocess.run([str(exe)], input=lines, capture_output=True, text=True, check=True).stdout.split("\n")
    rows = [tuple(map(int, line.split())) for line in out if line]
    assert len(rows) == len(CASES)
    for (asked, rings, each, total), (n, s) in zip(rows, CASES):
        assert (asked, rings) == (n, s)
        assert each & (each - 1) == 0  # a power of two: positions map to records with a mask
        assert total >= asked and (each == 1 or (each // 2) * rings < asked), (asked, rings, each)
        assert ring_capacity.per_ring(asked, rings) == each
    # The case: the seed's 1,048,576 on an H200 kept 540,672 when rounded down.
    assert ring_capacity.per_ring(1 << 20, 132) == 8192
    assert ring_capacity.per_ring(1 << 20, 132, "down") == 4096
    assert ring_capacity.kept(1 << 20, 132, schema.SCHEMA_HASH) == (8192, 132, 1_081_344)
    assert ring_capacity.kept(1 << 20, 132, 0x9E00B211ABF33CF1) == (4096, 132, 540_672)  # written rounding down
    assert ring_capacity.kept(0, 132, schema.SCHEMA_HASH) is None


def test_info_says_how_many_records_were_kept(tmp_path):
    path = tmp_path / "r.gpuobs"
    synthetic.write_block_trace_recording(path, n_launches=2, blocks_per_launch=4)  # --capacity 2^20, 132 SMs
    run = [sys.executable, "-m", "gpuobs", "info", str(path)]
    wide = {**os.environ, "COLUMNS": "400"}  # info wraps its lines to the terminal's width
    text = subprocess.run(run, capture_output=True, text=True, check=True, env=wide).stdout
    assert "--capacity 1,048,576 records per context (kept 1,081,344: 8,192 per SM ring x 132)" in text, text
    d = json.loads(subprocess.run([*run, "--json"], capture_output=True, text=True, check=True).stdout)
    assert d["capacity_kept"] == [[8192, 132, 1_081_344]]
