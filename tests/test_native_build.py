"""The native parts build without a GPU (nvcc + the sanitizer headers), and the
injected tool fails open in a process that cannot be instrumented."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuobs.record.native_build import NativeUnavailable, build, find_toolchain


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    try:
        find_toolchain()
    except NativeUnavailable as exc:
        pytest.skip(str(exc))
    os.environ["GPUOBS_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    return build()


def test_patches_probe_and_tool_build(native):
    assert native.patches.stat().st_size > 10_000 and native.probe.stat().st_size > 1_000
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(native.tool)], capture_output=True, text=True).stdout
    from gpuobs.record.runtime import CONTROL_CALLS  # tool/control_api.h's declarations, as cffi reads them

    assert len(CONTROL_CALLS) == 8 and "gpuobs_tool_live_graphs" in CONTROL_CALLS
    for name in CONTROL_CALLS:
        assert f" T {name}\n" in symbols, name
    # every rung of the ladder is in the patch image, for sm_90 too
    cuobjdump = shutil.which("cuobjdump") or str(
        Path(os.path.realpath(find_toolchain().cuda_include)).parent / "bin" / "cuobjdump"
    )
    if Path(cuobjdump).exists():
        listing = subprocess.run([cuobjdump, "-lelf", "-lptx", str(native.patches)], capture_output=True, text=True)
        assert listing.returncode == 0, listing.stderr
        elves = [line for line in listing.stdout.splitlines() if line.startswith("ELF file")]
        ptx = [line for line in listing.stdout.splitlines() if line.startswith("PTX file")]
        assert any(line.endswith(".sm_90.cubin") for line in elves), listing.stdout
        # the PTX for newer GPUs: cuobjdump 12 names it compute_120, 13.5 sm_120 (same file)
        assert any(re.search(r"\.(compute|sm)_120\.ptx$", line) for line in ptx), listing.stdout


def _preloaded(native, tmp_path, code: str, **env):
    full = dict(
        os.environ,
        LD_PRELOAD=str(native.tool),
        GPUOBS_OUTPUT=str(tmp_path / "x.gpuobs"),
        GPUOBS_PATCHES=str(native.patches),
        GPUOBS_SANITIZER_LIB=str(native.sanitizer_lib),
    )
    full.update(env)
    full.pop("GPUOBS_REPORTED", None)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True)


def test_fail_open_keeps_exit_code_and_says_why_once(native, tmp_path):
    proc = _preloaded(native, tmp_path, "import sys; print('ran'); sys.exit(7)", GPUOBS_MODE="warp_magic")
    assert proc.returncode == 7 and proc.stdout == "ran\n"
    lines = [line for line in proc.stderr.splitlines() if line.startswith("gpuobs:")]
    assert lines == [
        "gpuobs: GPUOBS_MODE='warp_magic' is not one of off, block_noop, block_counter, "
        "block_trace, mem_noop, mem_sampled, mem_full, block_trace_noop, block_starts; running uninstrumented"
    ]


@pytest.mark.parametrize(
    "env,message",
    [
        ({"GPUOBS_SAMPLE_SHIFT": "99"}, "GPUOBS_SAMPLE_SHIFT='99' is not a whole number in [0, 32]"),
        ({"GPUOBS_CAPACITY": "lots"}, "GPUOBS_CAPACITY='lots' is not a whole number"),
        (
            {"GPUOBS_KERNELS": "(("},
            "GPUOBS_KERNELS='((' is not a valid regular expression: unbalanced '(': no ')' closes it at character 2",
        ),
        (
            {"GPUOBS_KERNELS": "gemm{2}"},
            "GPUOBS_KERNELS='gemm{2}' is not a valid regular expression: counted repetition "
            "{m,n} is not supported (write \\{ for a brace) at character 5",
        ),
        ({"GPUOBS_CALLBACK_SCOPE": "grid"}, "GPUOBS_CALLBACK_SCOPE='grid' is not function or launch"),
        (
            {"GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE": "grid"},
            "GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE='grid' is not function or launch (GPUOBS_CALLBACK_SCOPE wins",
        ),
        # the new name wins: its bad value is reported though the old name holds a good one
        (
            {"GPUOBS_CALLBACK_SCOPE": "grid", "GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE": "launch"},
            "GPUOBS_CALLBACK_SCOPE='grid' is not function or launch",
        ),
        (
            {"GPUOBS_SANITIZER_LIB": "/nonexistent/libsanitizer-public.so", "CUDA_HOME": "/nonexistent"},
            "no compute-sanitizer library found",
        ),
    ],
)
def test_bad_options_fail_open(native, tmp_path, env, message):
    proc = _preloaded(native, tmp_path, "print('ran')", **env)
    assert proc.returncode == 0 and proc.stdout == "ran\n"
    assert message in proc.stderr and "running uninstrumented" in proc.stderr


@pytest.mark.parametrize(
    "env",
    [
        {"GPUOBS_CALLBACK_SCOPE": "launch"},
        {"GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE": "function"},
        {"GPUOBS_CALLBACK_SCOPE": "launch", "GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE": "grid"},
    ],
)
def test_callback_scope_is_read_under_both_names_and_the_new_one_wins(native, tmp_path, env):
    proc = _preloaded(native, tmp_path, "print('ran')", **env)
    assert proc.returncode == 0 and proc.stdout == "ran\n"
    assert "is not function or launch" not in proc.stderr, (
        proc.stderr
    )  # (without a GPU it stands down later, for libcuda)


def test_without_libz_the_tool_says_so_and_runs_on(native, tmp_path):
    """GPUOBS_ZLIB names a libz that cannot be loaded: one line says the launch tables are
    written unpacked, and the program runs as ever (the tool then stands down here for
    want of a GPU, as without the variable)."""
    proc = _preloaded(native, tmp_path, "print('ran')", GPUOBS_ZLIB="libz-gone.so.9", GPUOBS_MODE="block_counter")
    assert proc.returncode == 0 and proc.stdout == "ran\n"
    assert "gpuobs: cannot load libz-gone.so.9 (" in proc.stderr
    assert "; launch tables are written unpacked" in proc.stderr
    quiet = _preloaded(native, tmp_path, "print('ran')", GPUOBS_ZLIB="libz-gone.so.9", GPUOBS_PACK_METADATA="none")
    assert quiet.returncode == 0 and "libz" not in quiet.stderr  # not packing: libz is never looked for


def test_record_passes_the_scope_under_its_gpuobs_name(native):
    from gpuobs.record.run import RecordOptions, tool_environment

    env = tool_environment(native, RecordOptions(scope="launch"), base={})
    assert env["GPUOBS_CALLBACK_SCOPE"] == "launch" and "GPU_OBSERVER_SAN_CALLBACK_DATA_SCOPE" not in env


def test_a_process_that_never_uses_cuda_writes_no_recording(native, tmp_path):
    proc = _preloaded(native, tmp_path, "print('ran')", GPUOBS_MODE="block_trace")
    assert proc.returncode == 0
    assert not (tmp_path / "x.gpuobs").exists()  # the file is created at the first CUDA context only


def test_the_tools_writer_is_read_by_the_python_reader(tmp_path, writer):
    import gpuobs
    from gpuobs.analysis import launches as analysis

    out = tmp_path / "tool.gpuobs"
    first = subprocess.run([str(writer), str(out)], capture_output=True, text=True, check=True).stdout.strip()
    assert first == str(out)
    rec = gpuobs.load(out)  # CRCs, framing and the 64-byte event alignment all as the reader expects
    assert rec.complete and rec.tool_version.startswith("gpuobs-tool") and rec.run.argv == ["prog", "--flag"]
    assert rec.function(0, 3).demangled == "kernel()"
    assert rec.events["time_start"].tolist() == [1000, 1001, 1002, 1003, 1004]
    assert rec.events.__array_interface__["data"][0] % 64 == 0
    assert (analysis.launch_index_of_events(rec) == 0).all() and int(rec.launch_counts["count"][0]) == 5
    # a second writer of the same run (a child process) gets its own file, named by its pid
    second = subprocess.run([str(writer), str(out)], capture_output=True, text=True, check=True).stdout.strip()
    assert second != str(out) and second.startswith(str(tmp_path / "tool.")) and second.endswith(".gpuobs")
    assert gpuobs.load(second).complete


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_the_makefile_builds_what_gpuobs_build_builds(native, tmp_path):
    """tool/Makefile and `gpuobs build` read one list of sources and flags
    (tool/build.mk): the same compiler commands, and the Makefile's tool loads."""
    from gpuobs.native_sources import native_root
    from gpuobs.record.native_build import tool_compile_command

    tc = find_toolchain()
    cuda_home = Path(tc.cuda_include).parent
    make = [
        "make",
        "-C",
        str(native_root() / "tool"),
        f"OUT={tmp_path}",
        f"CXX={tc.cxx}",
        f"NVCC={tc.nvcc}",
        f"CUDA_HOME={cuda_home}",
        f"SANITIZER_DIR={tc.sanitizer_dir}",
    ]
    planned = subprocess.run([*make, "-n"], capture_output=True, text=True, check=True).stdout
    ours = tool_compile_command(tc, tmp_path / "libgpuobs_tool.so")
    for word in ours[1:]:
        if word.startswith("/") and not word.endswith(".so"):
            word = Path(word).name  # the Makefile names sources relative to tool/
        assert word.split("/")[-1] in planned, word
    built = subprocess.run([*make, str(tmp_path / "libgpuobs_tool.so")], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    proc = subprocess.run(
        [sys.executable, "-c", "print('ran')"],
        capture_output=True,
        text=True,
        env=dict(os.environ, LD_PRELOAD=str(tmp_path / "libgpuobs_tool.so"), GPUOBS_MODE="off"),
    )
    assert proc.returncode == 0 and proc.stdout == "ran\n", proc.stderr


def test_the_tool_starts_once_whichever_way_it_came_in(native, tmp_path):
    """LD_PRELOAD and CUDA_INJECTION64_PATH (the driver calls InitializeInjection at
    cuInit, simulated here): one start; a second copy of the library stays off."""
    copy = tmp_path / "copy" / "libgpuobs_tool.so"
    copy.parent.mkdir()
    shutil.copy(native.tool, copy)
    code = (
        "import ctypes, sys\n"
        f"lib = ctypes.CDLL({str(native.tool)!r})\n"
        "print(lib.InitializeInjection(), lib.InitializeInjection())\n"
        f"other = ctypes.CDLL({str(copy)!r})\n"
        "print(other.InitializeInjection())\n"
    )
    proc = _preloaded(native, tmp_path, code, GPUOBS_MODE="block_counter", GPUOBS_DEBUG="1")
    assert proc.returncode == 0 and proc.stdout == "1 1\n1\n", proc.stdout + proc.stderr
    assert proc.stderr.count("tool starting (loaded)") == 1, proc.stderr
    assert "another copy of the tool runs in this process; this one (loaded) stays off" in proc.stderr
    # Injection alone (no LD_PRELOAD): the library loaded as the driver loads it, then its entry point.
    env = dict(os.environ, GPUOBS_MODE="block_counter", GPUOBS_DEBUG="1", GPUOBS_OUTPUT=str(tmp_path / "y.gpuobs"))
    env.pop("LD_PRELOAD", None)
    env.pop("GPUOBS_STARTED_PID", None)
    alone = subprocess.run(
        [sys.executable, "-c", f"import ctypes; print(ctypes.CDLL({str(native.tool)!r}).InitializeInjection())"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert alone.returncode == 0 and alone.stdout == "1\n" and alone.stderr.count("tool starting") == 1, alone.stderr


def test_record_sets_both_ways_in_to_one_path(native):
    from gpuobs.record.run import RecordOptions, tool_environment

    env = tool_environment(native, RecordOptions(), base={})
    assert env["LD_PRELOAD"] == env["CUDA_INJECTION64_PATH"] == str(native.tool)
    kept = tool_environment(native, RecordOptions(), base={"CUDA_INJECTION64_PATH": "/opt/other.so"})
    assert kept["CUDA_INJECTION64_PATH"] == "/opt/other.so"  # another injected tool's is left as it is


@pytest.mark.parametrize("call", ["os._exit(3)", "ctypes.CDLL(None)._Exit(4)"])
def test_exit_without_destructors_reaches_the_tool_and_keeps_the_status(native, tmp_path, call):
    """_exit / _Exit are the tool's first (they finish a recording: CPython's forkserver
    children leave through os._exit; the GPU test checks the file), then the real one."""
    proc = _preloaded(native, tmp_path, f"import os, ctypes\nprint('ran', flush=True)\n{call}", GPUOBS_DEBUG="1")
    status = 3 if "_exit" in call else 4
    assert proc.returncode == status and proc.stdout == "ran\n", proc.stderr
    name = "_exit" if "_exit" in call else "_Exit"
    assert f"{name}({status}): no recording of this process to finish" in proc.stderr, proc.stderr
