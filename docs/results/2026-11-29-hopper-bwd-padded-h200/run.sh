#!/usr/bin/env bash
# The Hopper backward at every multiple of 8 up to 128 (builds of 64 and 128 columns, the others
# padded up), and a regression pass of every generation after the host-side refactors of the same
# day (one Attention-impl macro for generations 1-4, the core's Guards collector, the portable
# backward's shared header), on the H200, in one call:
# - verify --pass bwd of the Hopper backward (head dims drawn from 8..128), reliability's backward
#   check and sanitize --pass bwd at a padded head dim;
# - verify of every generation's forward and of every backward kernel, a few cases each;
# - the backward at D = 80 and 96 beside the portable backward.
# From the repo root, with a stripped release xtask of the tree in .carry/xtask:
#   bash docs/results/2026-11-29-hopper-bwd-padded-h200/run.sh
# Outputs in $OUT: bwd.txt (the summary), bench-bwd.md, logs-bwd.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/bwd.txt; L=/tmp/logs-bwd; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
P=persistent-hopper
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-bwd 190 $X verify --pass bwd --kernels $P --cases 250 --seed 3301
job verify-fwd-all 190 $X verify --cases 30 --seed 3302
job verify-bwd-all 190 $X verify --pass bwd --cases 20 --seed 3303
job sanitize 190 $X sanitize --pass bwd --kernels $P --head-dims 80 --logs $L/san
job reliability 190 $X reliability --kernels $P --head-dims 96 --only backward --no-huge
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -12 | tr '\n' ' ')" | tee -a $R; done
grep -hE "^\| [a-z]+ \| " $L/reliability.log | cut -c1-220 | tee -a $R
grep -hE "FAIL|reliability:|panicked" $L/reliability.log $L/verify*.log | cut -c1-400 | head -12 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
timeout $((290 - SECONDS)) $X bench-all --pass bwd --shape 4,16,2048,80 --shape 4,16,2048,96 --kernels $P,persistent-portable --no-fa3 --out-dir $L/bench > $L/bench.log 2>&1; echo "bench rc=$? (${SECONDS}s)" | tee -a $R
cp $L/bench/bench-bwd.md $OUT/bench-bwd.md 2>/dev/null
grep -E "^\| 4,16" $L/bench/bench-bwd.md | head -30 | tee -a $R
echo "(${SECONDS}s)" | tee -a $R
(cd /tmp && tar cJf $OUT/logs-bwd.tar.xz logs-bwd)
