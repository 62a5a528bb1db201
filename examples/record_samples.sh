#!/usr/bin/env bash
# Records the shipped sample recordings (run on a GPU machine, after a schema change):
#   bash examples/record_samples.sh examples/data
set -euo pipefail
dest=${1:-examples/data}
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The first two flush windows are model set-up; the sample keeps the decode steps.
python3 -m gpuobs record --force --mode block_trace -o "$tmp/decode_block_trace.gpuobs" -- \
  python3 examples/decode_graph.py --steps 3
python3 -m gpuobs trim "$tmp/decode_block_trace.gpuobs" -o "$dest/decode_block_trace.gpuobs" -f --flushes 2:
python3 -m gpuobs record --force --mode mem_sampled -o "$dest/decode_mem_sampled.gpuobs" -- \
  python3 examples/decode_graph.py --steps 1
# The side-by-side pair: both runs on the same machine, minutes apart, as a user
# would make them (a profiler run from another boot lands before this one's).
python3 -m gpuobs record --force --api-trace -o "$dest/side_by_side_api_trace.gpuobs" -- \
  python3 examples/side_by_side.py
python3 examples/side_by_side.py --profile "$dest/side_by_side_profiler.json"
