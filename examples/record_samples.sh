#!/usr/bin/env bash
# Records the shipped sample recordings (run on a GPU machine):
#   bash examples/record_samples.sh examples/data
set -euo pipefail
dest=${1:-examples/data}
mkdir -p "$dest"
python3 -m gpuobs record --force --mode block_trace -o "$dest/decode_block_trace.gpuobs" -- \
  python3 examples/decode_graph.py --steps 3
python3 -m gpuobs record --force --mode mem_sampled -o "$dest/decode_mem_sampled.gpuobs" -- \
  python3 examples/decode_graph.py --steps 1
