#!/usr/bin/env bash
# The duty cycle on the device as shipped (b543f39: the patches' _duty twins). From the
# repository root with the wheels in .whl/ (carry them). It measures the cost first (the
# issue's target: block_starts under --duty within block_noop + 0.03 of no tool, in x no
# tool), with and without the data budget's sampler, then dumps the twins' SASS and runs
# the duty GPU tests (SKIP_TESTS=1: the cost alone). Files go to $OUT. The nineteenth
# session's first build gave +0.036 (50ms/5s) and +0.040 (50ms/1s) on an H100; the twins,
# +0.028 and +0.033 on an H200 (twentieth session, docs/benchmarks.md).
T00=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/exporter PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv | tee $OUT/gpu.txt
python3 -m gpuobs build > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - T00 ))s"
mkdir -p $OUT/sr
timeout 330 python3 benchmarks/serving_rate.py --replays ${REPLAYS:-6000} --rounds ${ROUNDS:-2} \
    --configs "${CONFIGS:-none,block_noop,block_starts%50/5000,block_starts+budget0%50/5000,block_starts%50/1000}" \
    --workdir $OUT/sr --json $OUT/sr.json 2>&1 | tee $OUT/sr.txt | grep -o '^round [0-9] [^:]*: {"ms_per_step": [0-9.]*'
grep -v "^ *$" $OUT/sr.txt | tail -7
for f in $OUT/sr/*.stderr; do gzip -f "$f"; done
echo "measured $(( $(date +%s) - T00 ))s"
SANI=$(python3 -c "from gpuobs.record import native_build as n; print(n.find_toolchain().sanitizer_include)")
F=$(sed -n 's/^PATCH_NVCCFLAGS := //p' tool/build.mk)
nvcc $F -I schemas -I"$SANI" -gencode arch=compute_90,code=sm_90 -o /tmp/p.fatbin device_patches/gpuobs_patches.cu &&
    cuobjdump -sass /tmp/p.fatbin > $OUT/patches.sass 2>&1
[ -n "$SKIP_TESTS" ] && { echo "done $(( $(date +%s) - T00 ))s (tests skipped)"; exit 0; }
LEFT=$(( 580 - ($(date +%s) - T00) )); echo "left for the tests: $LEFT s"
(cd tests && timeout $LEFT python3 -m pytest -q -p no:cacheprovider --rootdir=.. -c ../pyproject.toml -m gpu \
    test_gpu_sampling.py test_patch_stack_saves.py > $OUT/pytest.txt 2>&1; echo "pytest rc=$?")
grep -E "passed|failed|Error|assert" $OUT/pytest.txt | tail -20
echo "done $(( $(date +%s) - T00 ))s"
