# Sourced at the start of every command on the lent GPU machine: carried wheels,
# the checkout on PYTHONPATH, logs under $OUT.
OUT=${OUT:-/tmp/gpuobs-out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/exporter:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 GPUOBS_GPU_TESTS=1
# What a log needs to say which machine ran it.
describe_machine() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.total --format=csv
  nvcc --version | tail -1
  python3 -c "import torch; print('torch', torch.__version__)"
}
