#!/usr/bin/env bash
# The Hopper forward's verify with V's own head dim in mode cases, run to completion: the sweep
# of docs/results/2026-11-30-decode-head-dims-h200/verify-hopper.sh (450 random cases, seed 3314,
# which ran out of its time there) with a longer limit, every progress line kept. From the repo
# root, with a stripped release xtask of the tree in .carry/xtask:
#   bash docs/results/2026-11-30-hopper-vdim-verify-h200/verify.sh
# Output in $OUT: verify-hopper.txt (the summary and every line that is not a passing case),
# verify-hopper.log.xz (everything).
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc-verify
SECONDS=0
timeout 540 .carry/xtask verify --kernels persistent-hopper --cases 450 --seed 3314 > /tmp/verify-hopper.log 2>&1
echo "verify rc=$? (${SECONDS}s)" > $OUT/verify-hopper.txt
grep -vE "^(ok|PASS)|cases, 0 failed" /tmp/verify-hopper.log | tail -60 >> $OUT/verify-hopper.txt
xz -c /tmp/verify-hopper.log > $OUT/verify-hopper.log.xz
tail -5 $OUT/verify-hopper.txt
