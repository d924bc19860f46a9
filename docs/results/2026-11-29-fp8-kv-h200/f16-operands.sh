#!/usr/bin/env bash
# The e4m3 KV cache on f16 operands (commit 5dfeaf0): verify 1000 cases with every case's K/V in
# e4m3 on the Hopper path and 600 on the portable path (in parallel), then the decode suite with
# e4m3 caches (contiguous and paged block 64) beside the bf16 caches and the bf16 peers (SDPA
# flash, cuDNN, FA3), the copy and the read probe, in one process.
# From the repo root, with a stripped release xtask of the tree in .carry/xtask and the FA3 and
# einops wheels in .carry/:
#   bash docs/results/2026-11-29-fp8-kv-h200/f16-operands.sh
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/f16-operands.txt; L=$OUT/logs-f16-operands; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
job() { local label=$1 t=$2; shift 2; (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) & }
job verify-e4m3-hopper 230 $X verify --kernels persistent-hopper --kv-dtype e4m3 --cases 1000 --seed 3811
job verify-e4m3-portable 230 $X verify --kernels persistent-portable --kv-dtype e4m3 --cases 600 --seed 3812
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -1)" | tee -a $R; done
grep -hE "FAIL|panicked" $L/verify*.log | cut -c1-400 | head -10 | tee -a $R
timeout 320 $X bench-all --suite decode --kv-dtype e4m3 --kernels persistent-hopper --fa3-path /tmp/fa3pkg --out-dir $L/decode > $L/bench-decode.log 2>&1
echo "bench decode rc=$? (${SECONDS}s)" | tee -a $R
cp $L/decode/bench-decode.md $OUT/bench-decode-f16-operands.md 2>/dev/null
sed -n '/^### e4m3 KV cache/,/^### [A-Z]/p' $L/decode/bench-decode.md | grep -E "^\|" | cut -d'|' -f2,5,6,7,9,11,12,13,14 | tee -a $R
echo "(${SECONDS}s)" | tee -a $R
