#!/bin/bash
# The decode suites beside the peers in one call on nvidia-h200, after the combine and epilogue
# rework: D = 128 with bf16 and e4m3 caches, SDPA's backends and FA3 (flash-attn3-jax 0.2.3),
# then D = 256 (no FA3 build there). Run from the repository root with a stripped release xtask
# in .carry/xtask and the FA3 and einops wheels in .carry/fa3/. Writes under $OUT: suites.txt,
# bench-decode-128.md, bench-decode-256.md.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/suites.txt; L=/tmp/logs-suites; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
pip install -q --no-deps --target /tmp/fa3pkg .carry/fa3/*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
timeout 330 $X bench-all --suite decode --kv-dtype e4m3 --kernels persistent-hopper --fa3-path /tmp/fa3pkg --out-dir $L/d128 > $L/d128.log 2>&1
echo "bench decode 128 rc=$? (${SECONDS}s)" | tee -a $R
cp $L/d128/bench-decode.md $OUT/bench-decode-128.md 2>/dev/null
timeout $((570 - SECONDS)) $X bench-all --suite decode --kv-dtype e4m3 --decode-head-dim 256 --kernels persistent-hopper --out-dir $L/d256 > $L/d256.log 2>&1
echo "bench decode 256 rc=$? (${SECONDS}s)" | tee -a $R
cp $L/d256/bench-decode.md $OUT/bench-decode-256.md 2>/dev/null
tail -3 $L/d128.log $L/d256.log | tee -a $R
