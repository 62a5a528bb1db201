"""cffi declarations written once: the slice encoder's (native_encoder.h, which
native_encoder.c includes) and the tool's control calls (tool/control_api.h, which
tool/control_api.cpp includes), with their status values named. The tool's exports
are checked against the declarations in test_native_build.py (it builds the tool)."""

import shutil
import subprocess

import pytest

from gpuobs.perfetto_export import native_encoder, slice_encoder
from gpuobs.record import runtime


def test_the_encoder_layout_cffi_reads_is_the_c_compilers(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    ffi = native_encoder._FFI
    fields = [("gpuobs_arg", f) for f, _ in ffi.typeof("struct gpuobs_arg").fields] + [
        ("gpuobs_slice_packets", f) for f, _ in ffi.typeof("struct gpuobs_slice_packets").fields
    ]
    probe = tmp_path / "layout.c"
    probe.write_text(
        '#include <stdio.h>\n#include <stddef.h>\n#include "native_encoder.h"\nint main(void) {\n'
        + "".join(f'    printf("%zu\\n", offsetof(struct {s}, {f}));\n' for s, f in fields)
        + '    printf("%zu\\n%zu\\n", sizeof(struct gpuobs_arg), sizeof(struct gpuobs_slice_packets));\n'
        + '    printf("%d %d %d %d %d\\n", GPUOBS_ARG_INT, GPUOBS_ARG_BOOL, GPUOBS_ARG_STRING, '
        + "GPUOBS_ENCODER_MAX_ARGS, GPUOBS_LANES_TOO_MANY);\n    return 0;\n}\n"
    )
    exe = tmp_path / "layout"
    subprocess.run([cc, f"-I{native_encoder.HEADER.parent}", str(probe), "-o", str(exe)], check=True)
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    want = [str(ffi.offsetof(f"struct {s}", f)) for s, f in fields]
    want += [str(ffi.sizeof("struct gpuobs_arg")), str(ffi.sizeof("struct gpuobs_slice_packets"))]
    want.append(
        f"{native_encoder.ARG_INT} {native_encoder.ARG_BOOL} {native_encoder.ARG_STRING} "
        f"{native_encoder.MAX_ARGS} {native_encoder.LANES_TOO_MANY}"
    )
    assert lines == want
    assert (slice_encoder.INT, slice_encoder.BOOL, slice_encoder.STRING) == (0, 1, 2)
    assert slice_encoder.MAX_ARGS == 32


class _FakeTool:
    """The control calls' answers, as the tool gives them."""

    def __init__(self, status):
        self.status = status

    def gpuobs_tool_pause(self):
        return self.status


def test_window_statuses_are_the_headers(monkeypatch):
    assert runtime.NOT_RECORDING == -1
    monkeypatch.setattr(runtime, "_lib", _FakeTool(runtime.NOT_RECORDING))
    with pytest.raises(runtime.AttachError, match="not recording"):
        runtime.pause()
    monkeypatch.setattr(runtime, "_lib", _FakeTool(5))
    assert runtime.pause() == 5
