"""C (host compiler), cffi and numpy must agree on every field of every schema struct."""

import subprocess

import numpy as np
import pytest

from gpuobs.native_sources import schema_header
from gpuobs.recording_file import schema

from .conftest import have_compiler


def _c_layout_program() -> str:
    lines = ["#include <stdio.h>", "#include <stddef.h>", f'#include "{schema_header()}"', "int main(void) {"]
    f = schema.ffi()
    for name in schema.struct_names():
        lines.append(f'printf("{name} %zu\\n", sizeof({name}));')
        for field, _ in f.typeof(name).fields:
            lines.append(
                f'printf("{name}.{field} %zu %zu\\n", offsetof({name}, {field}), sizeof((({name}*)0)->{field}));'
            )
    lines.append("return 0; }")
    return "\n".join(lines)


def _expected_layout() -> dict:
    f = schema.ffi()
    out = {}
    for name in schema.struct_names():
        out[name] = (f.sizeof(name),)
        for field, info in f.typeof(name).fields:
            out[f"{name}.{field}"] = (info.offset, f.sizeof(info.type))
    return out


@pytest.mark.skipif(not have_compiler("cc"), reason="no host C compiler")
def test_host_compiler_agrees_with_cffi(tmp_path):
    src = tmp_path / "layout.c"
    src.write_text(_c_layout_program())
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-std=c11", "-Wall", "-Werror", str(src), "-o", str(exe)], check=True)
    printed = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    c_layout = {}
    for line in printed.splitlines():
        key, *nums = line.split()
        c_layout[key] = tuple(int(n) for n in nums)
    assert c_layout == _expected_layout()


def test_numpy_dtypes_follow_cffi_field_by_field():
    f = schema.ffi()
    for name in schema.struct_names():
        dt = schema.dtype(name)
        assert dt.itemsize == f.sizeof(name), name
        for field, info in f.typeof(name).fields:
            np_type, np_offset = dt.fields[field][0], dt.fields[field][1]
            assert np_offset == info.offset, f"{name}.{field}"
            assert np_type.itemsize == f.sizeof(info.type), f"{name}.{field}"


def test_event_is_one_cache_line_with_required_fields():
    dt = schema.EVENT_DTYPE
    assert dt.itemsize == 64
    for field in (
        "time_start",
        "time_end",
        "sm_id",
        "function_slot",
        "grid_id",
        "block_x",
        "block_y",
        "block_z",
        "kind",
        "pc",
        "address",
        "access_size",
        "flags",
        "thread_index",
    ):
        assert field in dt.names
    assert dt.fields["time_start"][0] == np.dtype("<u8")  # raw %globaltimer ns, never converted


def test_schema_hash_constant_matches_layout():
    computed = schema.computed_schema_hash()
    assert schema.SCHEMA_HASH == computed, (
        f"layout changed: set GPUOBS_SCHEMA_HASH to {computed:#018x} in schemas/gpuobs_schema.h"
    )


def test_schema_hash_changes_when_a_field_moves():
    text = schema.layout_text()
    moved = text.replace("time_end:uint64_t@8", "time_end:uint64_t@16")
    assert moved != text
    assert schema.fnv1a64(moved.encode()) != schema.computed_schema_hash()


@pytest.mark.skipif(not have_compiler("nvcc"), reason="no nvcc")
def test_nvcc_compiles_the_header_with_its_static_asserts(tmp_path):
    src = tmp_path / "schema_check.cu"
    src.write_text(
        f'#include "{schema_header()}"\n'
        "__global__ void touch(gpuobs_event* e) { e->kind = GPUOBS_EVENT_BLOCK; }\n"
        'static_assert(offsetof(gpuobs_event, kind) == 58, "kind offset");\n'
    )
    subprocess.run(["nvcc", "-arch=sm_90", "-c", str(src), "-o", str(tmp_path / "x.o")], check=True)


def test_mode_names_in_the_header_follow_the_enum():
    """The tool's GPUOBS_MODE names (GPUOBS_MODE_NAMES, outside the cffi part) are the
    enum's names in value order: one list, checked against the other."""
    import re

    from gpuobs.native_sources import schema_header

    text = schema_header().read_text()
    body = re.search(r"#define GPUOBS_MODE_NAMES\s*\\?\s*\{(.*?)\}", text, re.S).group(1)
    names = re.findall(r'"(\w+)"', body)
    assert names == [m.name.lower() for m in sorted(schema.Mode, key=int)]
    assert list(range(len(names))) == sorted(int(m) for m in schema.Mode)
