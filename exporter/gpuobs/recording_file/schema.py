"""The record layouts, read from the one C header through cffi.

numpy dtypes are derived from cffi's sizeof/offsetof, so C, CUDA and Python
cannot drift apart silently: tests/test_schema.py compiles the same header
with the host compiler and compares every field."""

from __future__ import annotations

import enum
import re
from functools import lru_cache

import numpy as np
from cffi import FFI

from ..native_sources import schema_header

CDEF_BEGIN = "/* gpuobs:cdef-begin */"
CDEF_END = "/* gpuobs:cdef-end */"

_NUMPY_SCALARS = {
    "uint8_t": "u1",
    "int8_t": "i1",
    "uint16_t": "<u2",
    "int16_t": "<i2",
    "uint32_t": "<u4",
    "int32_t": "<i4",
    "uint64_t": "<u8",
    "int64_t": "<i8",
}


def cdef_text(header_text: str) -> str:
    """The part of the header that cffi reads (plain declarations only)."""
    try:
        start = header_text.index(CDEF_BEGIN) + len(CDEF_BEGIN)
        end = header_text.index(CDEF_END, start)
    except ValueError as exc:
        raise ValueError(f"schema header lacks the markers {CDEF_BEGIN} / {CDEF_END}") from exc
    return header_text[start:end]


@lru_cache(maxsize=1)
def _ffi_and_lib():
    ffi = FFI()
    ffi.cdef(cdef_text(schema_header().read_text()))
    return ffi, ffi.dlopen(None)


def ffi() -> FFI:
    return _ffi_and_lib()[0]


def constant(name: str) -> int:
    return getattr(_ffi_and_lib()[1], name)


def struct_names() -> list[str]:
    typedefs, _structs, _unions = ffi().list_types()
    return sorted(n for n in typedefs if ffi().typeof(n).kind == "struct")


def _field_format(ctype):
    if ctype.kind == "primitive":
        return _NUMPY_SCALARS[ctype.cname]
    if ctype.kind == "array":
        if ctype.item.cname == "char":
            return f"S{ctype.length}"
        return (_field_format(ctype.item), (ctype.length,))
    if ctype.kind == "struct":
        return dtype(ctype.cname.replace("struct ", ""))
    raise TypeError(f"schema field type {ctype.cname} has no numpy equivalent")


@lru_cache(maxsize=None)
def dtype(struct_name: str) -> np.dtype:
    """The little-endian numpy dtype of a schema struct, from cffi's layout."""
    f = ffi()
    ctype = f.typeof(struct_name)
    names, formats, offsets = [], [], []
    for name, field in ctype.fields:
        names.append(name)
        formats.append(_field_format(field.type))
        offsets.append(field.offset)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": f.sizeof(ctype)})


def layout_text() -> str:
    """Canonical text of every struct layout and enum value: what the schema hash covers."""
    f = ffi()
    parts = []
    for name in struct_names():
        ctype = f.typeof(name)
        fields = ";".join(f"{fname}:{field.type.cname}@{field.offset}" for fname, field in ctype.fields)
        parts.append(f"{name}[{f.sizeof(ctype)}]{{{fields}}}")
    for enum_name in sorted(set(_enum_names()) - _BEHAVIOUR_ENUMS):
        etype = f.typeof(f"enum {enum_name}")
        values = ",".join(f"{k}={v}" for v, k in sorted(etype.elements.items()))
        parts.append(f"enum {enum_name}{{{values}}}")
    return "\n".join(parts)


# What modes do, not how anything is laid out: outside the schema hash.
_BEHAVIOUR_ENUMS = {"gpuobs_trait", "gpuobs_mode_traits"}


def _enum_names() -> list[str]:
    text = cdef_text(schema_header().read_text())
    return re.findall(r"\benum\s+(\w+)\s*\{", text)


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in data:
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def computed_schema_hash() -> int:
    return fnv1a64(layout_text().encode())


def _enum(name: str, prefix: str) -> type[enum.IntEnum]:
    elements = ffi().typeof(f"enum {name}").elements
    members = {k[len(prefix) :]: v for v, k in sorted(elements.items())}
    return enum.IntEnum(name, members)


FORMAT_VERSION = constant("GPUOBS_FORMAT_VERSION")
SCHEMA_HASH = constant("GPUOBS_SCHEMA_HASH")
LAUNCH_TABLE_SIZE = constant("GPUOBS_LAUNCH_TABLE_SIZE")
MAX_STRIPES = constant("GPUOBS_MAX_STRIPES")
NO_FLUSH = constant("GPUOBS_NO_FLUSH")
# Earlier layouts this reader still reads, with what differs: each entry's structs
# are a subset of today's, unchanged (only enums, a struct and a chunk type were
# added since), so only what the writer did differently is listed here.
# "capacity_rounding": how the writer sized each SM's ring for --capacity N (down: at
# most N in all; today up, at least N: analysis/ring_capacity.py).
_ROUNDED_DOWN = {"capacity_rounding": "down"}
COMPATIBLE_SCHEMAS = {
    0xA8172B000AB71874: {},  # before packed chunks (chunk flags were always 0)
    0x746BE70A1966131A: {},  # before the sample gate and the SAMPLING chunk (nothing sampled out)
    0x9E00B211ABF33CF1: _ROUNDED_DOWN,  # before conditional-body launches and --capacity rounded up
    0x73B702BBE2B866CC: _ROUNDED_DOWN,  # before the record gate and sampled-out counts (gpuobs_control only)
    0x5C1E4BD4A6AF10CA: _ROUNDED_DOWN,  # before the program-waited notice (ring pressure)
    # before notices and device-launched grids (2026-12-01)
    0x49906C504643937C: {"launch_table_size": 4096, **_ROUNDED_DOWN},
    0xE78BC05CF512A957: _ROUNDED_DOWN,  # before block_starts (its mode, flag, warp arrivals and SLOTS chunk)
    0x8DC623220B0E97DB: _ROUNDED_DOWN,  # before the device rings' limits (gpuobs_control only: no file layout changed)
    0xCA299A28008F5156: {},  # before the duty cycle on the device (SAMPLING's flags were reserved, always 0)
}


def launch_table_size(schema_hash: int) -> int:
    """How many launch-counter slots the writer of a recording had."""
    return COMPATIBLE_SCHEMAS.get(schema_hash, {}).get("launch_table_size", LAUNCH_TABLE_SIZE)


EVENT_DTYPE = dtype("gpuobs_event")
Mode = _enum("gpuobs_mode", "GPUOBS_MODE_")
EventKind = _enum("gpuobs_event_kind", "GPUOBS_EVENT_")
ChunkType = _enum("gpuobs_chunk_type", "GPUOBS_CHUNK_")
ChunkFlag = _enum("gpuobs_chunk_flags", "GPUOBS_CHUNK_")
NoticeCode = _enum("gpuobs_notice_code", "GPUOBS_NOTICE_")
LaunchFlag = _enum("gpuobs_launch_flags", "GPUOBS_LAUNCH_")
SamplingFlag = _enum("gpuobs_sampling_flags", "GPUOBS_SAMPLING_")
ModuleStatus = _enum("gpuobs_module_status", "GPUOBS_MODULE_")
BLOCK_END_UNCONFIRMED = constant("GPUOBS_BLOCK_END_UNCONFIRMED")
BLOCK_EARLY_EXITS = constant("GPUOBS_BLOCK_EARLY_EXITS")

MODE_NAMES = {m: m.name.lower() for m in Mode}
Trait = _enum("gpuobs_trait", "GPUOBS_TRAIT_")
# Each mode's row of the schema's mode table (enum gpuobs_mode_traits): the one place
# a mode's behaviour is decided, for the tool and for Python alike.
MODE_TRAITS = {m: constant(f"GPUOBS_TRAITS_{m.name}") for m in Mode}


def mode_has(mode, trait: int) -> bool:
    """Whether a mode (a Mode, its value or its name) has the trait; False for an unknown mode."""
    if isinstance(mode, str):
        mode = next((m for m, name in MODE_NAMES.items() if name == mode), None)
    try:
        return bool(MODE_TRAITS[Mode(mode)] & trait) if mode is not None else False
    except ValueError:
        return False
