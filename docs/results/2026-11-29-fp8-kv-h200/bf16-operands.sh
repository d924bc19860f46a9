#!/usr/bin/env bash
# The decode suite with e4m3 caches (contiguous and paged block 64, descales per KV head) beside
# the bf16 caches and the bf16 peers (SDPA flash, cuDNN, FA3), the copy and the read probe, in
# one process; then the e4m3 rows alone at ring depths 4 and 8 (the default is 6 at D = 128).
# From the repo root, with a stripped release xtask of the tree in .carry/xtask and the FA3 and
# einops wheels in .carry/:
#   bash docs/results/2026-11-29-fp8-kv-h200/bf16-operands.sh
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/bf16-operands.txt; L=$OUT/logs-bf16-operands; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
timeout 330 $X bench-all --suite decode --kv-dtype e4m3 --kernels persistent-hopper --fa3-path /tmp/fa3pkg --out-dir $L/decode > $L/bench-decode.log 2>&1
echo "bench decode rc=$? (${SECONDS}s)" | tee -a $R
cp $L/decode/bench-decode.md $OUT/bench-decode-bf16-operands.md 2>/dev/null
sed -n '/^### e4m3 KV cache/,/^### [A-Z]/p' $L/decode/bench-decode.md | grep -E "^\|" | head -30 | tee -a $R
for s in 4 8; do
  timeout 90 env FLASHCORE_DECODE_STAGES=$s $X bench-all --suite decode --kv-dtype e4m3 --kernels persistent-hopper --no-peers --no-fa3 --out-dir $L/stages$s > $L/stages$s.log 2>&1
  echo "== e4m3 rows, FLASHCORE_DECODE_STAGES=$s: rc=$? (${SECONDS}s)" | tee -a $R
  sed -n '/^### e4m3 KV cache/,/^### [A-Z]/p' $L/stages$s/bench-decode.md | grep -E "^\|" | head -20 | tee -a $R
done
echo "(${SECONDS}s)" | tee -a $R
