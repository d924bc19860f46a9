#!/usr/bin/env bash
# After the e4m3 ring change (4 slots at D = 64, 3 at 256), on nvidia-h200, in one call:
# xtask reliability, every check, on persistent-hopper with the flags of
# ../2026-11-30-decode-combine-h200/reliability.sh (soak 1500 cases, repeated runs 200, the
# tensors past 2^31 elements left out), and beside it (niced) verify on e4m3 caches, head dims
# 64/128/256 drawn, with the plan's split counts and with a split count drawn per problem.
# From the repo root, with a stripped release xtask in .carry/xtask. Output in $OUT:
# checks.txt (the table and the verify totals), reliability.log.xz, verify logs.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc-rel
R=$OUT/checks.txt; X=.carry/xtask
SECONDS=0
(FLASHCORE_CACHE_DIR=/tmp/fc-v1 nice -n 19 timeout 540 $X verify --kernels persistent-hopper --kv-dtype e4m3 \
   --cases 200 --seed 5301 > $OUT/verify-e4m3.log 2>&1; echo "verify-e4m3 rc=$? (${SECONDS}s)" >> /tmp/rc.txt) &
(FLASHCORE_CACHE_DIR=/tmp/fc-v2 FLASHCORE_DECODE_SPLITS=sweep nice -n 19 timeout 540 $X verify --kernels persistent-hopper \
   --kv-dtype e4m3 --cases 150 --seed 5302 > $OUT/verify-e4m3-sweep.log 2>&1; echo "verify-e4m3-sweep rc=$? (${SECONDS}s)" >> /tmp/rc.txt) &
timeout 545 $X reliability --kernels persistent-hopper --no-huge --soak-cases 1500 \
    --persistent-runs 200 --backward-runs 200 > /tmp/reliability.log 2>&1
echo "reliability rc=$? (${SECONDS}s)" > $R
wait
cat /tmp/rc.txt >> $R
grep -E "^\|" /tmp/reliability.log >> $R
for f in $OUT/verify*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -1)" >> $R; done
grep -hE "FAIL|panicked" $OUT/verify*.log | cut -c1-300 | head -8 >> $R
xz -c /tmp/reliability.log > $OUT/reliability.log.xz
xz $OUT/verify*.log
grep -cE "\| PASS \|" $R; grep -E "FAIL|rc=|verify" $R | head -12
tail -3 /tmp/reliability.log
