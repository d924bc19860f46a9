#!/usr/bin/env bash
# The e4m3 KV cache with two CTAs an SM (commit 7993934): verify 1000 cases with every case's
# K/V in e4m3 on the Hopper path and 600 on the portable path, and the Python package's fp8 GPU
# tests (plain wheel), in parallel; then the decode suite with e4m3 caches (contiguous and paged
# block 64) beside the bf16 caches and the bf16 peers (SDPA flash, cuDNN, FA3), the copy and the
# read probe, in one process.
# From the repo root, with a stripped release xtask of the tree in .carry/xtask, the plain wheel
# in .carry/py/ and the FA3 and einops wheels in .carry/:
#   bash docs/results/2026-11-29-fp8-kv-h200/two-ctas.sh
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/two-ctas.txt; L=$OUT/logs-two-ctas; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
python3 -m pip install -q --no-deps --target /tmp/fc-plain .carry/py/flashcore-*.whl > $L/pip.log 2>&1
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl >> $L/pip.log 2>&1
echo "pip rc=$?" | tee -a $R
job() { local label=$1 t=$2; shift 2; (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) & }
job verify-e4m3-hopper 200 $X verify --kernels persistent-hopper --kv-dtype e4m3 --cases 1000 --seed 3821
job verify-e4m3-portable 200 $X verify --kernels persistent-portable --kv-dtype e4m3 --cases 600 --seed 3822
job pytest-fp8 200 env PYTHONPATH=/tmp/fc-plain FLASHCORE_POISON_OUTPUTS=1 python3 -m pytest -q -n 4 -p no:cacheprovider -rs crates/py/tests/test_gpu.py -k fp8
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -1)" | tee -a $R; done
echo "pytest fp8: $(tail -1 $L/pytest-fp8.log)" | tee -a $R
grep -hE "FAIL|panicked|^ERROR" $L/verify*.log $L/pytest-fp8.log | cut -c1-300 | head -12 | tee -a $R
timeout 300 $X bench-all --suite decode --kv-dtype e4m3 --kernels persistent-hopper --fa3-path /tmp/fa3pkg --out-dir $L/decode > $L/bench-decode.log 2>&1
echo "bench decode rc=$? (${SECONDS}s)" | tee -a $R
cp $L/decode/bench-decode.md $OUT/bench-decode-two-ctas.md 2>/dev/null
sed -n '/^### e4m3 KV cache/,/^### [A-Z]/p' $L/decode/bench-decode.md | grep -E "^\|" | cut -d'|' -f2,5,6,7,9,11,12,13,14 | tee -a $R
echo "(${SECONDS}s)" | tee -a $R
