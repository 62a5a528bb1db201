#!/usr/bin/env bash
# The whole GPU suite in one call on the lent GPU machine: one build, then part3 beside
# part2 and, after it, part1, each pytest with its own tmp root; logs in $OUT.
#   bash tests/gpu_programs/device_suite.sh [pytest args for every part...]
# Side by side the parts took 546 s on an H100 (twenty-fifth session: part3 186 s, part2
# 263 s, part1 239 s after part2), where one call each costs three machine starts. Each
# part stops at the call's ten minutes (575 s from the start), so its log says how far it got.
set -uo pipefail
t0=$(date +%s)
source "$(dirname "$0")/device_env.sh"
source "$(dirname "$0")/gpu_parts.sh"
elapsed() { echo $(($(date +%s) - t0)); }
describe_machine > "$OUT/env.txt" 2>&1
python3 -m gpuobs build > "$OUT/build.log" 2>&1 || { echo "build failed"; tail -20 "$OUT/build.log"; exit 1; }
rm -f "$OUT/rc.txt"
echo "built in $(elapsed) s"

# part NAME FILES... [pytest args]: one pytest run, stopped 575 s after the start.
part() {
  local name=$1; shift
  local left=$((575 - $(elapsed)))
  if ((left <= 0)); then  # `timeout 0` would set no limit at all
    echo "$name not run: no time left at $(elapsed) s" > "$OUT/$name.log"
    echo "$name rc=124 at $(elapsed) s" >> "$OUT/rc.txt"
    return
  fi
  timeout "$left" python3 -m pytest -v -p no:cacheprovider --durations=10 \
    --basetemp="/tmp/gpuobs-$name" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? at $(elapsed) s" >> "$OUT/rc.txt"
}
# shellcheck disable=SC2086  # a part is a list of test files
part part3 $GPU_PART3 "$@" &
# shellcheck disable=SC2086
{ part part2 $GPU_PART2 "$@"; part part1 $GPU_PART1 "$@"; } &
wait
cat "$OUT/rc.txt"
for name in part1 part2 part3; do
  echo "== $name: $(tail -1 "$OUT/$name.log")"
  grep -E "FAILED|ERROR|SKIPPED|XFAIL|XPASS" "$OUT/$name.log" | head -12
done
# The lent machine brings back a few files only: the tests' own outputs go back as one archive.
tar -czf "$OUT/gpu_test_files.tgz" --exclude='*.gpuobs' -C /tmp gpuobs-part1 gpuobs-part2 gpuobs-part3 2>/dev/null || true
! grep -qv " rc=0 " "$OUT/rc.txt"
