#!/usr/bin/env bash
# The decode suite at head dims 512 and 96 on the H200: flashcore's decode kernel beside the
# peers that take the dim (SDPA's backends), a device-to-device copy and the read probe, in one
# call.
# From the repo root, with a stripped release xtask of the tree in .carry/xtask:
#   bash docs/results/2026-11-30-decode-head-dims-h200/bench.sh
# Outputs in $OUT: bench.txt (the summary), bench-decode-512.md, bench-decode-96.md, logs-bench.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/bench.txt; L=/tmp/logs-bench; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
for d in 512 96; do
  timeout $((560 - SECONDS)) $X bench-all --suite decode --decode-head-dim $d --kernels persistent-hopper --no-fa3 --out-dir $L/bench-$d > $L/bench-$d.log 2>&1; echo "bench $d rc=$? (${SECONDS}s)" | tee -a $R
  cp $L/bench-$d/bench-decode.md $OUT/bench-decode-$d.md 2>/dev/null
done
for d in 512 96; do echo "## D = $d" | tee -a $R; grep -E "^\| " $L/bench-$d/bench-decode.md | head -40 | tee -a $R; done
echo "(${SECONDS}s)" | tee -a $R
(cd /tmp && tar cJf $OUT/logs-bench.tar.xz logs-bench)
