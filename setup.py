"""Ships the native sources (schema header, host tool, device patches) inside the
Python package, so `gpuobs record` can build them on a GPU machine from any install."""

import pathlib
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

NATIVE_DIRS = ("schemas", "tool", "device_patches")
NATIVE_SUFFIXES = {".h", ".hpp", ".cpp", ".cu", ".md", ".txt", ".mk"}  # build.mk: the sources and flags


class BuildPyWithNative(build_py):
    def run(self):
        super().run()
        root = pathlib.Path(__file__).parent
        target = pathlib.Path(self.build_lib) / "gpuobs" / "_native"
        for name in NATIVE_DIRS:
            for src in sorted((root / name).glob("*")):
                if src.is_file() and (src.suffix in NATIVE_SUFFIXES or src.name == "Makefile"):
                    dst = target / name / src.name
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, dst)


setup(cmdclass={"build_py": BuildPyWithNative})
