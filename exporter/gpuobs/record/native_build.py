"""Finds the CUDA toolkit and the compute-sanitizer, and builds the native parts:
the device patches (nvcc, as a tools-patch fatbin), the clock probe, and the host
tool (the host C++ compiler). Results are cached by a hash of the sources."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import GpuobsError
from ..native_cache import cache_root, cached_build
from ..native_sources import native_root

BUILD_SETTINGS = "build.mk"  # in tool/: the sources and flags, shared with tool/Makefile


def build_settings() -> dict[str, tuple[str, ...]]:
    """tool/build.mk's `NAME := words` lines."""
    settings = {}
    for line in (native_root() / "tool" / BUILD_SETTINGS).read_text().splitlines():
        name, sep, words = line.partition(":=")
        if sep and not line.lstrip().startswith("#"):
            settings[name.strip()] = tuple(words.split())
    return settings


_SETTINGS = build_settings()
PATCH_ARCHS = _SETTINGS["PATCH_ARCHS"]
PTX_ARCH = _SETTINGS["PTX_ARCH"][0]
TOOL_SOURCES = _SETTINGS["TOOL_SOURCES"]


TOOL_NAME, PATCHES_NAME, PROBE_NAME = "libgpuobs_tool.so", "gpuobs_patches.fatbin", "gpuobs_clock_probe.fatbin"


class NativeUnavailable(GpuobsError, RuntimeError):
    """What is missing to build or run the native tool, said plainly."""


@dataclass
class Toolchain:
    nvcc: str
    cxx: str
    cuda_include: Path
    sanitizer_dir: Path  # holds include/ and libsanitizer-public.so

    @property
    def sanitizer_include(self) -> Path:
        return self.sanitizer_dir / "include"

    @property
    def sanitizer_lib(self) -> Path:
        return self.sanitizer_dir / "libsanitizer-public.so"


@dataclass
class NativeBuild:
    directory: Path
    tool: Path
    patches: Path
    probe: Path
    sanitizer_lib: Path


def _cuda_roots() -> list[Path]:
    roots = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            roots.append(Path(os.environ[var]))
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(Path(os.path.realpath(nvcc)).parent.parent)
    roots.append(Path("/usr/local/cuda"))
    roots += [Path(p) for p in sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    return roots


def _wheel_sanitizer_dirs() -> list[Path]:
    """The nvidia-cuda-sanitizer-api wheel's folder, where installed."""
    found = []
    try:
        import nvidia  # namespace package of NVIDIA's wheels
    except ImportError:
        return found
    for base in getattr(nvidia, "__path__", []):
        found += [Path(p) for p in sorted(glob.glob(os.path.join(base, "cu*", "compute-sanitizer")), reverse=True)]
    return found


def sanitizer_dirs() -> list[Path]:
    """Candidate compute-sanitizer folders, best first: one named by the user, then
    the toolkit's (it matches the installed driver), then the PyPI wheel's."""
    dirs = []
    if os.environ.get("GPUOBS_SANITIZER_DIR"):
        dirs.append(Path(os.environ["GPUOBS_SANITIZER_DIR"]))
    dirs += [root / "compute-sanitizer" for root in _cuda_roots()]
    dirs += _wheel_sanitizer_dirs()
    return [d for d in dirs if (d / "include" / "sanitizer.h").is_file() and (d / "libsanitizer-public.so").is_file()]


def find_toolchain() -> Toolchain:
    missing = []
    nvcc = shutil.which("nvcc")
    if not nvcc:
        missing.append("nvcc (the CUDA toolkit's compiler) is not on PATH")
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        missing.append("a host C++ compiler (g++ or c++; or set CXX)")
    cuda_include = next((r / "include" for r in _cuda_roots() if (r / "include" / "cuda.h").is_file()), None)
    if cuda_include is None:
        missing.append("cuda.h (set CUDA_HOME to the CUDA toolkit)")
    sanitizers = sanitizer_dirs()
    if not sanitizers:
        missing.append(
            "the compute-sanitizer headers and libsanitizer-public.so (the CUDA toolkit's "
            "compute-sanitizer/ folder, or `pip install nvidia-cuda-sanitizer-api`; or set GPUOBS_SANITIZER_DIR)"
        )
    if missing:
        raise NativeUnavailable("cannot build the gpuobs tool: missing " + "; ".join(missing))
    return Toolchain(nvcc, cxx, cuda_include, sanitizers[0])


def _source_hash(tc: Toolchain) -> str:
    root = native_root()
    h = hashlib.sha256()
    for sub in ("schemas", "tool", "device_patches"):
        for path in sorted((root / sub).glob("*")):
            if path.suffix in {".h", ".cpp", ".cu"} or path.name == BUILD_SETTINGS:
                h.update(path.name.encode())
                h.update(path.read_bytes())
    h.update(f"{tc.nvcc}|{tc.cxx}|{tc.sanitizer_dir}|{PATCH_ARCHS}".encode())
    return h.hexdigest()[:16]


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise NativeUnavailable(f"building {what} failed:\n$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")


def _gencode_flags(archs=PATCH_ARCHS) -> list[str]:
    flags = []
    for arch in archs:
        flags += ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
    return flags + ["-gencode", f"arch=compute_{PTX_ARCH},code=compute_{PTX_ARCH}"]


def patch_compile_command(tc: Toolchain, out: Path, archs=PATCH_ARCHS, source: Path | None = None) -> list[str]:
    """The patches' build; `source` replaces gpuobs_patches.cu (benchmarks build variants of it)."""
    root = native_root()
    return [
        tc.nvcc,
        *_SETTINGS["PATCH_NVCCFLAGS"],
        f"-I{root / 'schemas'}",
        f"-I{tc.sanitizer_include}",
        *_gencode_flags(archs),
        "-o",
        str(out),
        str(source or root / "device_patches" / "gpuobs_patches.cu"),
    ]


def patch_ptx_command(tc: Toolchain, out: Path, arch: str = "90", source: Path | None = None) -> list[str]:
    """The patches as PTX for one architecture: what the tests read to check each
    patch's memory operations without a GPU or a disassembler."""
    root = native_root()
    return [
        tc.nvcc,
        "--ptx",
        "--keep-device-functions",
        "-O3",
        f"-I{root / 'schemas'}",
        f"-I{tc.sanitizer_include}",
        f"-arch=compute_{arch}",
        "-o",
        str(out),
        str(source or root / "device_patches" / "gpuobs_patches.cu"),
    ]


def probe_compile_command(tc: Toolchain, out: Path) -> list[str]:
    root = native_root()
    return [
        tc.nvcc,
        *_SETTINGS["PROBE_NVCCFLAGS"],
        *_gencode_flags(),
        "-o",
        str(out),
        str(root / "device_patches" / "gpuobs_clock_probe.cu"),
    ]


def tool_compile_command(tc: Toolchain, out: Path) -> list[str]:
    root = native_root()
    from .. import __version__

    return [
        tc.cxx,
        *_SETTINGS["TOOL_CXXFLAGS"],
        f'-DGPUOBS_TOOL_VERSION="gpuobs-tool {__version__}"',
        f"-I{root / 'schemas'}",
        f"-I{tc.sanitizer_include}",
        f"-I{tc.cuda_include}",
        *[str(root / "tool" / s) for s in TOOL_SOURCES],
        "-o",
        str(out),
        *_SETTINGS["TOOL_LIBS"],
    ]


def build(force: bool = False, progress=None) -> NativeBuild:
    """Builds (or reuses) the tool, the patches and the probe; raises NativeUnavailable.
    `progress(message)` hears which part is compiling (the first build takes seconds).
    The cache (gpuobs.native_cache) is safe for concurrent builds and checks what it hands out."""
    say = progress or (lambda _message: None)
    tc = find_toolchain()
    names = (TOOL_NAME, PATCHES_NAME, PROBE_NAME)

    def compile_into(folder: Path) -> None:
        say(f"compiling the device patches for sm_{', sm_'.join(PATCH_ARCHS)} (nvcc)")
        _run(patch_compile_command(tc, folder / PATCHES_NAME), "the device patches")
        say("compiling the clock probe (nvcc)")
        _run(probe_compile_command(tc, folder / PROBE_NAME), "the clock probe")
        say(f"compiling the host tool ({Path(tc.cxx).name})")
        _run(tool_compile_command(tc, folder / TOOL_NAME), "the host tool")

    try:
        directory = cached_build(_source_hash(tc), list(names), compile_into, force=force)
    except OSError as exc:
        raise NativeUnavailable(
            f"cannot build into the cache {cache_root()} (set GPUOBS_CACHE to a writable folder): {exc.strerror or exc}"
        ) from None
    return NativeBuild(
        directory, directory / TOOL_NAME, directory / PATCHES_NAME, directory / PROBE_NAME, tc.sanitizer_lib
    )
