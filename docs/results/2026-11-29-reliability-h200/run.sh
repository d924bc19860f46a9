#!/usr/bin/env bash
# Every reliability check on both generation-5 paths, run alone on the H200, on the tree with the
# batch-invariant key split by each sequence's own lengths (docs/MODES.md, *Batch invariance*).
# From the repo root, with a stripped release xtask in .carry/:
#   bash docs/results/2026-11-29-reliability-h200/run.sh
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
R=$OUT/reliability.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $R
git log -1 --format='tree: %h %s' 2>/dev/null | tee -a $R
SECONDS=0
timeout 580 .carry/xtask reliability --kernels persistent-hopper,persistent-portable --no-huge \
  --soak-cases 1500 --persistent-runs 200 --backward-runs 200 --json $OUT/reliability.json \
  > $OUT/reliability.log 2>&1
echo "reliability rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| [a-z]+ \| " $OUT/reliability.log | cut -c1-220 | tee -a $R
grep -E "FAIL|reliability:|panicked" $OUT/reliability.log | cut -c1-400 | head -12 | tee -a $R
