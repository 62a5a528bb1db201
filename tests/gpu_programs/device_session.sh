#!/usr/bin/env bash
# One call on the lent GPU machine: set up, build, run the GPU tests, keep logs in $OUT.
#   bash tests/gpu_programs/device_session.sh [part1|part2|part3] [pytest args...]
# A call runs at most ten minutes; the whole GPU suite took 380 s on an H100 (sixteenth
# session) and ran past 585 s on an H200 (twentieth, the duty cycle's tests added), so
# it runs as three parts, one a call, each well inside the limit (part2, with the
# duty tests' 160 s, took 229 s on an H100 in the twenty-first session). device_suite.sh
# runs the three side by side in one call.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
source "$(dirname "$0")/gpu_parts.sh"
# shellcheck disable=SC2086  # a part is a list of test files
case "${1:-}" in
part1) shift; set -- $GPU_PART1 "$@" ;;
part2) shift; set -- $GPU_PART2 "$@" ;;
part3) shift; set -- $GPU_PART3 "$@" ;;
esac
describe_machine 2>&1 | tee "$OUT/env.txt"
python3 -m gpuobs build 2>&1 | tee "$OUT/build.log" || exit 1
python3 -m pytest -v -p no:cacheprovider --durations=15 "$@" 2>&1 | tee "$OUT/gpu_tests.log"
status=${PIPESTATUS[0]}
# The lent machine brings back a few files only: the tests' own outputs (recordings'
# stderr, pytest's tmp folders' logs) go back as one archive beside the three logs.
tar -czf "$OUT/gpu_test_files.tgz" --exclude='*.gpuobs' -C /tmp "pytest-of-$(id -un)" 2>/dev/null || true
exit "$status"
