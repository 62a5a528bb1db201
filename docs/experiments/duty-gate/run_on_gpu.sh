#!/usr/bin/env bash
# The duty-gate experiment on a GPU (README.md beside this file says what and why).
# Run from the repository root with experiment.patch applied and the wheels in .whl/.
# The eighteenth session's four calls, in order:
#   bash docs/experiments/duty-gate/run_on_gpu.sh                      (STEPS="base lever gate", GV="0 1")
#   STEPS="base one" bash docs/experiments/duty-gate/run_on_gpu.sh
#   XV=3 STEPS="base gate" GV="0 3" GCFG="block_starts+paused" bash docs/experiments/duty-gate/run_on_gpu.sh
#   XV=4 STEPS="gate base" GV=4 GCFG="block_starts+budget0" NORGATE=1 bash docs/experiments/duty-gate/run_on_gpu.sh
# (the first ran with GV="0 1" GCFG="block_starts+paused" NORGATE=1)
# Prepared for the next session, not yet run (the duty cycle on the device clock, as it would ship):
#   XV=5 STEPS="base clock" bash docs/experiments/duty-gate/run_on_gpu.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/exporter PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv | tee $OUT/gpu.txt
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
t build; python3 -m gpuobs build > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
python3 docs/experiments/duty-gate/build_variants.py ${XV:-1 2} > $OUT/variants.log 2>&1; cat $OUT/variants.log
t built
R=${ROUNDS:-1}
sr() { # NAME CONFIGS [ENV...]
  local name=$1 cfgs=$2; shift 2
  mkdir -p $OUT/$name
  env "$@" timeout ${TMO:-150} python3 benchmarks/serving_rate.py --replays 600 --rounds $R --configs "$cfgs" --workdir $OUT/$name --json $OUT/$name/r.json > $OUT/$name/out.txt 2>&1
  echo "rc=$?" >> $OUT/$name/out.txt
  t "$name rc: $(tail -1 $OUT/$name/out.txt)"
  python3 -c "
import json,re,sys
for l in open('$OUT/$name/out.txt'):
    m=re.match(r'round (\d+) (\S+): (.*)',l)
    if m:
        r=json.loads(m.group(3)); print('  ',m.group(1),m.group(2),{k:r.get(k) for k in ('ms_per_step','attempted','recorded','dropped','sampled_out','waits','error')})
"
  grep -h "X lever\|X update\|X upload" $OUT/$name/*.stderr 2>/dev/null | tail -4
  grep -hc "X turn" $OUT/$name/*.stderr 2>/dev/null | tr '\n' ' '; echo
}
for step in ${STEPS:-base lever gate}; do
 case $step in
  base) sr base none,block_noop ;;
  lever) for L in 0 1 2; do sr lever$L 'block_trace%10/50' GPUOBS_X_DUTY_BIND=1 GPUOBS_X_LEVER=$L; done ;;
  gate) for V in ${GV:-0 1 2}; do P=; [ $V != 0 ] && P=/tmp/xg$V.fatbin
          sr gate$V "${GCFG:-block_starts+paused,block_starts%50/5000}" GPUOBS_X_NOBIND=1 GPUOBS_X_PATCHES=$P
          [ -z "$NORGATE" ] && sr rgate$V 'block_starts%50/5000' GPUOBS_X_DUTY_GATE=1 GPUOBS_X_PATCHES=$P; done ;;
  one) sr one2 'block_trace%10/50' GPUOBS_X_DUTY_BIND=1 GPUOBS_X_LEVER=2 GPUOBS_X_UNBOUND_ONE=1
       sr onecost 'block_starts%50/5000,block_starts%50/1000' GPUOBS_X_DUTY_BIND=1 GPUOBS_X_LEVER=2 GPUOBS_X_UNBOUND_ONE=1 ;;
  clock) P=/tmp/xg5.fatbin  # the device-clock duty cycle, its shifts in the callback data (prepared, not yet run)
       sr clockcost 'block_starts+budget0' GPUOBS_X_PATCHES=$P GPUOBS_X_DUTY_CLOCK=32,26
       sr clockshare 'block_starts+budget0@8192' GPUOBS_X_PATCHES=$P GPUOBS_X_DUTY_CLOCK=26,23
       sr clockfull 'block_starts+budget0@8192' ;;
  levercost) for L in 1 2; do sr cost$L 'block_starts%50/5000,block_starts%50/1000' GPUOBS_X_DUTY_BIND=1 GPUOBS_X_LEVER=$L; done ;;
 esac
done
t done
