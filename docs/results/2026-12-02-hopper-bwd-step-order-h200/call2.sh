#!/usr/bin/env bash
# Call 2: the step order as default (dQ before dK), timed beside the peers.
# - bench-all --pass bwd on the ladder's D = 128 rows and (4,16,2048,64), with SDPA's backends
#   (torch) and FA3's backward (flash-attn3-jax 0.2.3 through jax.grad) timed live;
# - the same rows with FLASHCORE_HOPPER_BWD_DQ_BEFORE_DK=0 (the order before), ours alone;
# - bench-all --pass bwd --suite bwd-modes: each mode against a dense backward of the same work.
# From the repo root, with .carry/xtask (release, stripped), .carry/flash_attn3_jax-0.2.3-*.whl and
# .carry/einops-*.whl:
#   bash docs/results/2026-12-02-hopper-bwd-step-order-h200/call2.sh
# Outputs in $OUT/call2: summary.txt, bench-bwd.md (+ json), bench-order0.md, bench-bwd-modes.md
# (+ json), logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
O=$OUT/call2; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-call2; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
python3 -m pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1
echo "pip rc=$?" | tee -a $R
S="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 4,16,2048,64"
timeout 220 $X bench-all --pass bwd --kernels $H $S --fa3-path /tmp/fa3pkg --out-dir $L/bench > $L/bench.log 2>&1
echo "bench-all bwd rc=$? (${SECONDS}s)" | tee -a $R
cp $L/bench/bench-bwd.md $L/bench/bench-bwd.json $O/ 2>/dev/null
FLASHCORE_HOPPER_BWD_DQ_BEFORE_DK=0 timeout 70 $X bench-all --pass bwd --kernels $H $S --no-peers --out-dir $L/order0 > $L/order0.log 2>&1
echo "bench order0 rc=$? (${SECONDS}s)" | tee -a $R
cp $L/order0/bench-bwd.md $O/bench-order0.md 2>/dev/null
timeout 250 $X bench-all --pass bwd --suite bwd-modes --kernels $H --repeats 9 --out-dir $L/modes > $L/modes.log 2>&1
echo "bench bwd-modes rc=$? (${SECONDS}s)" | tee -a $R
cp $L/modes/bench-bwd-modes.* $O/ 2>/dev/null
(cd /tmp && tar cJf $O/logs.tar.xz logs-call2)
grep -E "^\| " $O/bench-bwd.md 2>/dev/null | head -12 | tee -a $R
grep -E "^\| [0-9]" $O/bench-order0.md 2>/dev/null | cut -d'|' -f2-6 | tee -a $R
grep -E "^\| " $O/bench-bwd-modes.md 2>/dev/null | tee -a $R
echo "done (${SECONDS}s)" | tee -a $R
