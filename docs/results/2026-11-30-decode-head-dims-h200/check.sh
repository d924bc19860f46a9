#!/usr/bin/env bash
# The decode kernel at every head dim (padded builds, V's own head dim, the 512 build) on the
# H200, correctness in one call: verify with every problem routed to the decode kernel
# (FLASHCORE_DECODE=force; head dims drawn from the whole range 8..=512, V dims among them),
# the same batch-invariant, the portable path as planned (decode-shaped problems to the decode
# kernel, the rest to the persistent kernel, past 256 refused), sanitize at 96 and 512, and
# reliability at 96 and 192.
# From the repo root, with a stripped release xtask of the tree in .carry/xtask:
#   bash docs/results/2026-11-30-decode-head-dims-h200/check.sh
# Outputs in $OUT: check.txt (the summary) and logs-check.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/check.txt; L=/tmp/logs-check; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-force 520 env FLASHCORE_DECODE=force $X verify --kernels persistent-hopper --cases 1000 --seed 3301
job verify-bi 520 env FLASHCORE_DECODE=force $X verify --kernels persistent-hopper --batch-invariant --cases 300 --seed 3302
job verify-portable 520 $X verify --kernels persistent-portable --cases 600 --seed 3303
job sanitize 400 env FLASHCORE_DECODE=force $X sanitize --pass fwd --kernels persistent-hopper --head-dims 96,512 --logs $L/san
job reliability 400 $X reliability --kernels persistent-hopper --head-dims 96,192 --only badinput,oob,determinism,nonfinite,modes,batchinv --determinism-runs 50 --persistent-runs 50
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -2 | tr '\n' ' ')" | tee -a $R; done
grep -hE "^\| [a-z]+ \| " $L/reliability.log | cut -c1-220 | tee -a $R
grep -hE "FAIL|reliability:|panicked" $L/reliability.log $L/verify*.log | cut -c1-400 | head -16 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
echo "(${SECONDS}s)" | tee -a $R
(cd /tmp && tar cJf $OUT/logs-check.tar.xz logs-check)
