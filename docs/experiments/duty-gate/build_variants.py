"""Builds the experiment's gate variants of gpuobs_patches.cu for sm_90, with the
project's own patch build command: /tmp/xgN.fatbin for each N given (the
GPUOBS_X_GATE values of experiment.patch)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "exporter"))

from gpuobs.record import native_build  # noqa: E402


def main() -> None:
    toolchain = native_build.find_toolchain()
    for variant in sys.argv[1:]:
        source = Path(f"/tmp/xg{variant}.cu")
        source.write_text(f'#define GPUOBS_X_GATE {variant}\n#include "{ROOT}/device_patches/gpuobs_patches.cu"\n')
        out = Path(f"/tmp/xg{variant}.fatbin")
        cmd = native_build.patch_compile_command(toolchain, out, archs=("90",), source=source)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        print("variant", variant, "rc", proc.returncode, proc.stderr[-500:], flush=True)


if __name__ == "__main__":
    main()
