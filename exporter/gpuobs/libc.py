"""A function of the process's C library, looked up once through ctypes, or None where
there is none to call: not Linux or not glibc (no such function), or no CDLL(None) at
all (Windows). Callers treat None as "nothing to ask"."""

from __future__ import annotations

import ctypes


def libc_function(name: str, argtypes: list, restype, use_errno: bool = False):
    try:
        call = getattr(ctypes.CDLL(None, use_errno=use_errno), name)
    except (OSError, AttributeError, TypeError):
        return None
    call.argtypes = argtypes
    call.restype = restype
    return call
