#!/usr/bin/env bash
# Call 3: two more step variants on top of the new order, then the checks of the default build.
# - bench-all --pass bwd, ours alone, D = 128 ladder rows: default (dQ before dK), + dSᵀ by
#   stmatrix (FLASHCORE_HOPPER_BWD_DS_STMATRIX=1), + one stage release a warp
#   (FLASHCORE_HOPPER_BWD_WARP_ARRIVALS=1), both, then the default again;
# - the default build: verify --pass bwd --cases 1000 (modes drawn), sanitize --pass bwd
#   (memcheck, racecheck), reliability --only backward;
# - verify --pass bwd with both variants on, for what time is left.
# From the repo root, with .carry/xtask (release, stripped):
#   bash docs/results/2026-12-02-hopper-bwd-step-order-h200/call3.sh
# Outputs in $OUT/call3: summary.txt, bench-<variant>.md, reliability.json, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
O=$OUT/call3; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-call3; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
S="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
DS=FLASHCORE_HOPPER_BWD_DS_STMATRIX=1; WA=FLASHCORE_HOPPER_BWD_WARP_ARRIVALS=1
for v in default ds wa dswa default2; do
  case $v in default*) E="";; ds) E=$DS;; wa) E=$WA;; dswa) E="$DS $WA";; esac
  env $E timeout 60 $X bench-all --pass bwd --kernels $H $S --no-peers --out-dir $L/bench-$v > $L/bench-$v.log 2>&1
  echo "bench $v rc=$? (${SECONDS}s)" | tee -a $R
  cp $L/bench-$v/bench-bwd.md $O/bench-$v.md 2>/dev/null
done
timeout 200 $X verify --pass bwd --kernels $H --cases 1000 --seed 20261203 > $L/verify.log 2>&1
echo "verify default rc=$? (${SECONDS}s)" | tee -a $R
grep -E 'cases|passed|failed|FAIL' $L/verify.log | tail -3 | cut -c1-300 | tee -a $R
timeout 110 $X sanitize --tools memcheck,racecheck --pass bwd --kernels $H --timeout 100 > $L/sanitize.log 2>&1
echo "sanitize rc=$? (${SECONDS}s)" | tee -a $R
tail -6 $L/sanitize.log | cut -c1-300 | tee -a $R
timeout 100 $X reliability --kernels $H --only backward --backward-runs 200 --json $O/reliability.json > $L/reliability.log 2>&1
echo "reliability rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^reliability:" $L/reliability.log | tee -a $R
grep -E "FAIL|panicked" $L/reliability.log | cut -c1-300 | head -10 | tee -a $R
LEFT=$((560 - SECONDS))
if [ $LEFT -gt 30 ]; then
  env $DS $WA timeout $LEFT $X verify --pass bwd --kernels $H --cases 1000 --seed 20261204 > $L/verify-dswa.log 2>&1
  echo "verify ds+wa rc=$? (${SECONDS}s)" | tee -a $R
  grep -E 'cases|passed|failed|FAIL' $L/verify-dswa.log | tail -2 | cut -c1-300 | tee -a $R
fi
(cd /tmp && tar cJf $O/logs.tar.xz logs-call3)
for v in default ds wa dswa default2; do
  echo "== $v" | tee -a $R
  grep -E "^\| [0-9]" $O/bench-$v.md 2>/dev/null | cut -d'|' -f2-6 | sort -u | tee -a $R
done
echo "done (${SECONDS}s)" | tee -a $R
