#!/usr/bin/env bash
# xtask reliability, every check, on persistent-hopper: its decode plans changed on 2026-11-30
# (the decode kernel at every head dim to 512, routed batch-invariant plans at 64/128/256 only;
# docs/results/2026-11-30-decode-head-dims-h200), where only badinput, oob, determinism,
# nonfinite, modes and batchinv ran. Soak and streams had not run on these plans. The soak is cut
# to 1500 cases and the repeated runs to 200 to fit one call; the two tensors past 2^31 elements
# are left out (--no-huge). From the repo root, with a stripped release xtask in .carry/xtask:
#   bash docs/results/2026-11-30-reliability-h200/run.sh
# Output in $OUT: reliability.txt (the table), reliability.log.xz (every line).
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc-rel
SECONDS=0
timeout 560 .carry/xtask reliability --kernels persistent-hopper --no-huge --soak-cases 1500 \
    --persistent-runs 200 --backward-runs 200 > /tmp/reliability.log 2>&1
echo "reliability rc=$? (${SECONDS}s)" > $OUT/reliability.txt
grep -E "^\|" /tmp/reliability.log >> $OUT/reliability.txt
xz -c /tmp/reliability.log > $OUT/reliability.log.xz
grep -cE "\| PASS \|" $OUT/reliability.txt; grep -E "FAIL|rc=" $OUT/reliability.txt | head -10
tail -4 /tmp/reliability.log
