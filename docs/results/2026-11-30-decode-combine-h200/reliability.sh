#!/usr/bin/env bash
# xtask reliability, every check, on persistent-hopper after the decode plan's change (the
# combine's grid, the shared memory a split grid reserves, the e4m3 ring depth at D = 128), with
# the flags of docs/results/2026-11-30-reliability-h200 (soak 1500 cases, repeated runs 200, the
# two tensors past 2^31 elements left out) so that the call fits. From the repo root, with a
# stripped release xtask in .carry/xtask:
#   bash docs/results/2026-11-30-decode-combine-h200/reliability.sh
# Output in $OUT: reliability.txt (the table), reliability.log.xz (every line).
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc-rel
SECONDS=0
timeout 570 .carry/xtask reliability --kernels persistent-hopper --no-huge --soak-cases 1500 \
    --persistent-runs 200 --backward-runs 200 > /tmp/reliability.log 2>&1
echo "reliability rc=$? (${SECONDS}s)" > $OUT/reliability.txt
grep -E "^\|" /tmp/reliability.log >> $OUT/reliability.txt
xz -c /tmp/reliability.log > $OUT/reliability.log.xz
grep -cE "\| PASS \|" $OUT/reliability.txt; grep -E "FAIL|rc=" $OUT/reliability.txt | head -10
tail -4 /tmp/reliability.log
