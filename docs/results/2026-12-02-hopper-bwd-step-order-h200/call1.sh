#!/usr/bin/env bash
# Call 1: the backward step's three variants (config.cuh: FC_BWD_DQ_BEFORE_DK, FC_BWD_LSE_EARLY,
# FC_BWD_L2_HINTS), each set by its FLASHCORE_HOPPER_BWD_* variable on one binary:
# - verify --pass bwd with all three on (modes drawn; the modes builds take only the first);
# - bench-all --pass bwd, persistent-hopper alone, base / A / A+B / A+B+C, then base and A again.
# From the repo root, with .carry/xtask (release, stripped):
#   bash docs/results/2026-12-02-hopper-bwd-step-order-h200/call1.sh
# Outputs in $OUT/call1: summary.txt, bench-<variant>.md, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
O=$OUT/call1; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-call1; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
ALL="FLASHCORE_HOPPER_BWD_DQ_BEFORE_DK=1 FLASHCORE_HOPPER_BWD_LSE_EARLY=1 FLASHCORE_HOPPER_BWD_L2_HINTS=1"
env $ALL timeout 120 $X verify --pass bwd --kernels $H --cases 300 --seed 20261202 > $L/verify-abc.log 2>&1
echo "verify A+B+C rc=$? (${SECONDS}s)" | tee -a $R
grep -E 'passed|failed|FAIL' $L/verify-abc.log | tail -4 | cut -c1-300 | tee -a $R
S="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 4,16,2048,64"
variant() {
  case $1 in
    base*) echo "" ;;
    A*) case $1 in A|A2) echo "FLASHCORE_HOPPER_BWD_DQ_BEFORE_DK=1" ;;
                   AB) echo "FLASHCORE_HOPPER_BWD_DQ_BEFORE_DK=1 FLASHCORE_HOPPER_BWD_LSE_EARLY=1" ;;
                   ABC) echo "$ALL" ;; esac ;;
  esac
}
for v in base A AB ABC base2 A2; do
  if [ $SECONDS -gt 520 ]; then echo "skipped $v (${SECONDS}s)" | tee -a $R; continue; fi
  env $(variant $v) timeout 75 $X bench-all --pass bwd --kernels $H $S --no-peers --out-dir $L/bench-$v > $L/bench-$v.log 2>&1
  echo "bench $v rc=$? (${SECONDS}s)" | tee -a $R
  cp $L/bench-$v/bench-bwd.md $O/bench-$v.md 2>/dev/null
done
(cd /tmp && tar cJf $O/logs.tar.xz logs-call1)
for v in base A AB ABC base2 A2; do
  echo "== $v" | tee -a $R
  grep -E "^\| [0-9]" $O/bench-$v.md 2>/dev/null | cut -d'|' -f2-6 | tee -a $R
done
echo "done (${SECONDS}s)" | tee -a $R
