#!/usr/bin/env bash
# Verify with V's own head dim drawn in the inference-mode cases too (b0e3519): the Hopper path as
# planned (its modes build at V's width, decode-shaped cases on the padded decode kernel), the
# same with every case forced onto the decode kernel, and the portable path; then the decode
# suite's rows at head dim 96 through the decode kernel (default) and through the persistent
# kernel that took them before 1ad7b03 (FLASHCORE_DECODE=off), flashcore only, in the same call.
# From the repo root, with a stripped release xtask of the tree in .carry/xtask:
#   bash docs/results/2026-11-30-decode-head-dims-h200/modes.sh
# Outputs in $OUT: modes.txt (the summary), bench-decode-96-{on,off}.md, logs-modes.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/modes.txt; L=/tmp/logs-modes; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-hopper 330 $X verify --kernels persistent-hopper --cases 600 --seed 3311
job verify-force 330 env FLASHCORE_DECODE=force $X verify --kernels persistent-hopper --cases 400 --seed 3312
job verify-portable 330 $X verify --kernels persistent-portable --cases 400 --seed 3313
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -2 | tr '\n' ' ')" | tee -a $R; done
grep -hE "FAIL|panicked|ratio [1-9]" $L/verify*.log | cut -c1-400 | head -16 | tee -a $R
for mode in on off; do
  env=""; [ $mode = off ] && env="FLASHCORE_DECODE=off"
  timeout $((560 - SECONDS)) env $env $X bench-all --suite decode --decode-head-dim 96 --kernels persistent-hopper --no-peers --no-gemm --out-dir $L/bench-$mode > $L/bench-$mode.log 2>&1; echo "bench $mode rc=$? (${SECONDS}s)" | tee -a $R
  cp $L/bench-$mode/bench-decode.md $OUT/bench-decode-96-$mode.md 2>/dev/null
done
for mode in on off; do echo "## decode kernel $mode" | tee -a $R; grep -E "^\| B=.*persistent-hopper" $L/bench-$mode/bench-decode.md | cut -d'|' -f2,5,6,7 | tee -a $R; done
echo "(${SECONDS}s)" | tee -a $R
(cd /tmp && tar cJf $OUT/logs-modes.tar.xz logs-modes)
