#!/usr/bin/env bash
# modes.sh's Hopper verify ran out of its 330 s beside the two other verify runs (945 of 1089
# cases done, 0 failed); this is the same sweep alone, with fewer random cases, so that it
# completes. From the repo root, with a stripped release xtask of the tree in .carry/xtask:
#   bash docs/results/2026-11-30-decode-head-dims-h200/verify-hopper.sh
# Output in $OUT: verify-hopper.txt.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
SECONDS=0
timeout 280 .carry/xtask verify --kernels persistent-hopper --cases 450 --seed 3314 > /tmp/v.log 2>&1; echo "verify rc=$? (${SECONDS}s)" > $OUT/verify-hopper.txt
grep -vE "cases, 0 failed" /tmp/v.log >> $OUT/verify-hopper.txt
cat $OUT/verify-hopper.txt
