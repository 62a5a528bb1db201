"""The schema's one table of modes (enum gpuobs_mode_traits, GPUOBS_MODE_PATCHES):
the same behaviour the tool's files and the patch plan wrote out by hand before
(tests/native/mode_traits_check.cpp, compiled with the host compiler), its rows in
mode order, and Python reading the same traits."""

import re
import subprocess

from gpuobs.native_sources import native_root
from gpuobs.recording_file import schema

from .native_helpers import compile_check


def test_the_table_does_what_the_hand_written_tests_did(tmp_path):
    exe = compile_check(tmp_path / "mode_traits_check", "mode_traits_check.cpp")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_rows_are_in_mode_order():
    text = (native_root() / "schemas" / "gpuobs_schema.h").read_text()
    rows = re.findall(r"ROW\((GPUOBS_TRAITS_\w+),", text.split("#define GPUOBS_MODE_PATCHES", 1)[1])
    assert rows == [f"GPUOBS_TRAITS_{name.upper()}" for name in schema.MODE_NAMES.values()]


def test_python_reads_the_same_traits():
    assert schema.mode_has("block_starts", schema.Trait.BOUNDED_ENDS)
    assert schema.mode_has(schema.Mode.BLOCK_TRACE, schema.Trait.MEASURED_ENDS)
    assert not schema.mode_has("block_trace_noop", schema.Trait.BLOCK_RECORDS)
    assert schema.mode_has("mem_full", schema.Trait.EVERY_ACCESS)
    assert not schema.mode_has("no such mode", schema.Trait.PATCHES)
    memory = {m for m in schema.MODE_NAMES.values() if schema.mode_has(m, schema.Trait.MEMORY_PATCH)}
    assert memory == {m for m in schema.MODE_NAMES.values() if m.startswith("mem")}
    timed = {m for m in schema.MODE_NAMES.values() if schema.mode_has(m, schema.Trait.BLOCK_RECORDS)}
    assert timed == {"block_trace", "block_starts"}
