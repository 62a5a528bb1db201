#!/usr/bin/env bash
# One call on the lent GPU machine: set up, build, run the GPU tests, keep logs in $OUT.
#   bash tests/gpu_programs/device_session.sh [pytest args...]
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv; nvcc --version | tail -1; python3 -c "import torch; print('torch', torch.__version__)"; } 2>&1 | tee "$OUT/env.txt"
python3 -m gpuobs build 2>&1 | tee "$OUT/build.log" || exit 1
python3 -m pytest -v -p no:cacheprovider "$@" 2>&1 | tee "$OUT/gpu_tests.log"
status=${PIPESTATUS[0]}
# The lent machine brings back a few files only: the tests' own outputs (recordings'
# stderr, pytest's tmp folders' logs) go back as one archive beside the three logs.
tar -czf "$OUT/gpu_test_files.tgz" --exclude='*.gpuobs' -C /tmp "pytest-of-$(id -un)" 2>/dev/null || true
exit "$status"
