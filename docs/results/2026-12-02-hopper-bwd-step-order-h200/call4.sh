#!/usr/bin/env bash
# Call 4: the default build as committed (dQ before dK, dSᵀ by stmatrix), causal rows, beside
# SDPA's backends and FA3's backward (flash-attn3-jax 0.2.3, jax.grad) timed live.
# From the repo root, with .carry/xtask (release, stripped), .carry/flash_attn3_jax-0.2.3-*.whl and
# .carry/einops-*.whl:
#   bash docs/results/2026-12-02-hopper-bwd-step-order-h200/call4.sh
# Outputs in $OUT/call4: summary.txt, bench-bwd.md (+ json).
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
O=$OUT/call4; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-call4; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
python3 -m pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1
S="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 4,16,2048,64"
timeout 170 $X bench-all --pass bwd --causal on --kernels persistent-hopper $S --fa3-path /tmp/fa3pkg --out-dir $L/bench > $L/bench.log 2>&1
echo "bench-all bwd rc=$? (${SECONDS}s)" | tee -a $R
cp $L/bench/bench-bwd.md $L/bench/bench-bwd.json $O/ 2>/dev/null
cp $L/bench.log $O/ 2>/dev/null
grep -E "^\| " $O/bench-bwd.md 2>/dev/null | head -6 | tee -a $R
echo "done (${SECONDS}s)" | tee -a $R
