#!/bin/bash
# Reliability of the change (.carry/xtask-pg): out-of-bounds tables, modes and batch invariance,
# determinism, on the Hopper path (which plans the decode kernel).
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
R=$OUT/summary.txt; mkdir -p $OUT
SECONDS=0
timeout 170 .carry/xtask-pg reliability --kernels persistent-hopper --only oob,modes,batchinv,determinism \
  --determinism-runs 20 --persistent-runs 50 > $OUT/reliability.log 2>&1
echo "reliability rc=$? (${SECONDS}s)" >> $R
grep -E "PASS|FAIL|SKIP|passed|failed" $OUT/reliability.log | tail -30 >> $R
cat $R
