#!/usr/bin/env bash
# A soak longer than one command may run on the lent GPU machine (ten minutes a command):
# `start` runs benchmarks/soak.py in a process session of its own (setsid: the machine
# keeps it running after the command returns, while the machine stays warm) and waits
# up to WAIT_S seconds; `collect`, in the next command on the same machine, waits for
# its JSON and copies the results into $OUT (the summary, each run's intervals and the
# tail of each run's `record` stderr). Everything lives in $SOAK_DIR (/tmp/gpuobs-soak).
#   bash benchmarks/detached_soak.sh start WAIT_S [soak.py args...]
#   bash benchmarks/detached_soak.sh collect [WAIT_S]
# The ten-minute soak of issue 33, in two calls:
#   GPUOBS_DEBUG=1 bash benchmarks/detached_soak.sh start 560 --seconds 600 --every 20 --warmup 30 --parallel
#   bash benchmarks/detached_soak.sh collect 560
set -uo pipefail
cd "$(dirname "$0")/.."
SOAK_DIR=${SOAK_DIR:-/tmp/gpuobs-soak}
OUT=${OUT:-$SOAK_DIR/out}
what=${1:-}
wait_s=${2:-560}
shift 2 2>/dev/null || shift $#

case "$what" in
start)
  if [ -f "$SOAK_DIR/pid" ] && kill -0 "$(cat "$SOAK_DIR/pid")" 2>/dev/null; then
    echo "detached_soak: a soak is still running in $SOAK_DIR (pid $(cat "$SOAK_DIR/pid"))" >&2
    exit 1
  fi
  # Only a folder an earlier start made (its marker inside) is emptied: never one of the user's.
  if [ -e "$SOAK_DIR" ] && [ ! -f "$SOAK_DIR/.detached-soak" ] && [ -n "$(ls -A "$SOAK_DIR" 2>/dev/null)" ]; then
    echo "detached_soak: $SOAK_DIR exists and is not an earlier soak's folder; set SOAK_DIR to a new one" >&2
    exit 1
  fi
  rm -rf "$SOAK_DIR" && mkdir -p "$SOAK_DIR" && touch "$SOAK_DIR/.detached-soak"
  [ -f tests/gpu_programs/device_env.sh ] && source tests/gpu_programs/device_env.sh
  python3 -m gpuobs build > "$SOAK_DIR/build.log" 2>&1 || { cat "$SOAK_DIR/build.log" >&2; exit 1; }
  setsid nohup python3 benchmarks/soak.py --workdir "$SOAK_DIR/runs" --json "$SOAK_DIR/soak.json" "$@" \
    > "$SOAK_DIR/soak.txt" 2>&1 < /dev/null &
  echo $! > "$SOAK_DIR/pid"
  for _ in $(seq 1 "$wait_s"); do [ -s "$SOAK_DIR/soak.json" ] && break; sleep 1; done
  tail -c 3000 "$SOAK_DIR/soak.txt"
  ;;
collect)
  for _ in $(seq 1 "$wait_s"); do [ -s "$SOAK_DIR/soak.json" ] && break; sleep 1; done
  if [ ! -s "$SOAK_DIR/soak.json" ]; then
    echo "detached_soak: no $SOAK_DIR/soak.json after ${wait_s} s (still running, or never started on this machine)" >&2
    tail -c 3000 "$SOAK_DIR/soak.txt" 2>/dev/null
    exit 1
  fi
  mkdir -p "$OUT"
  cp "$SOAK_DIR/soak.json" "$SOAK_DIR/soak.txt" "$OUT/"
  for d in "$SOAK_DIR"/runs/*/; do
    [ -d "$d" ] || continue
    n=$(basename "$d")
    cp "$d/intervals.jsonl" "$OUT/$n.intervals.jsonl" 2>/dev/null
    tail -c 400000 "$d/record.stderr" > "$OUT/$n.stderr.txt" 2>/dev/null
  done
  tail -c 4000 "$SOAK_DIR/soak.txt"
  ;;
*)
  echo "usage: bash benchmarks/detached_soak.sh start WAIT_S [soak.py args...] | collect [WAIT_S]" >&2
  exit 2
  ;;
esac
