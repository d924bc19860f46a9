#!/usr/bin/env bash
# Call 3: every reliability check on the plan with unequal varlen units on one CTA each (1a65cc2),
# then bwd-modes' varlen rows alone on the GPU.
# - xtask reliability, all checks, persistent-hopper: the soak cut to 1000 cases and the repeated
#   runs to 200 to fit one call; the tensors past 2^31 elements left out (--no-huge);
# - bench-all --pass bwd --suite bwd-modes --case varlen.
# From the repo root, with .carry/xtask (release, stripped):
#   bash docs/results/2026-12-02-hopper-bwd-grid-h200/call3.sh
# Outputs in $OUT/call3: summary.txt, reliability.txt (the table), reliability.log.xz,
# modes-varlen.md (+ json).
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
O=$OUT/call3; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
timeout 470 $X reliability --kernels persistent-hopper --no-huge --soak-cases 1000 \
    --persistent-runs 200 --backward-runs 200 > /tmp/reliability.log 2>&1
RC=$?
echo "reliability rc=$RC (${SECONDS}s)" | tee -a $R
echo "reliability rc=$RC (${SECONDS}s)" > $O/reliability.txt
grep -E "^\|" /tmp/reliability.log >> $O/reliability.txt
xz -c /tmp/reliability.log > $O/reliability.log.xz
echo "PASS rows: $(grep -cE '\| PASS \|' $O/reliability.txt), SKIP rows: $(grep -cE '\| SKIP \|' $O/reliability.txt)" | tee -a $R
grep -E "\| FAIL \|" $O/reliability.txt | cut -c1-400 | tee -a $R
tail -3 /tmp/reliability.log | tee -a $R
timeout $((585 - SECONDS)) $X bench-all --pass bwd --suite bwd-modes --kernels persistent-hopper --case varlen --repeats 9 \
    --out-dir /tmp/modes > /tmp/modes.log 2>&1
echo "bwd-modes varlen rc=$? (${SECONDS}s)" | tee -a $R
cp /tmp/modes/bench-bwd-modes.md $O/modes-varlen.md; cp /tmp/modes/bench-bwd-modes.json $O/modes-varlen.json
grep -E "^\| varlen" $O/modes-varlen.md | cut -d'|' -f3,6-8 | tee -a $R
echo "done (${SECONDS}s)" | tee -a $R
