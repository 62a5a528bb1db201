"""Where the native sources (schema header, host tool, device patches) live.

An installed package carries them under gpuobs/_native (see setup.py); a checkout
used in place has them at its root. Everything that needs them asks here."""

from __future__ import annotations

from pathlib import Path

from .errors import GpuobsError

HEADER_NAME = "gpuobs_schema.h"


class NativeSourcesMissing(GpuobsError, RuntimeError):
    pass


def native_root() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "_native", here.parents[1]):
        if (candidate / "schemas" / HEADER_NAME).is_file():
            return candidate
    raise NativeSourcesMissing(
        f"cannot find schemas/{HEADER_NAME} under {here / '_native'} or {here.parents[1]}: "
        "reinstall gpuobs with `pip install .` from a checkout"
    )


def schema_header() -> Path:
    return native_root() / "schemas" / HEADER_NAME
