#!/bin/bash
# The final build (.carry/xtask, fc43c65): the decode kernel's timeline (FLASHCORE_DECODE_TRACE=1,
# common/decode_trace.cuh; timeline.py, as in docs/results/2026-12-01-decode-one-sequence-h200)
# on the one-sequence row at D = 512 and 256 and on the speculative row at 256 (the two 256 rows
# under 90 % of the probe in call 2); then the one-sequence row at 512 under 8 splits a KV head
# (64 CTAs, below the HBM's limit: a CTA's own read rate).
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/summary.txt; L=/tmp/logs; rm -rf $L; mkdir -p $L
D=docs/results/2026-12-02-decode-column-scores-h200
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
run() {  # name head_dim case env...
  local n=$1 d=$2 c=$3; shift 3
  env "$@" timeout 60 $X bench-all --suite decode --kernels persistent-hopper --case $c --no-peers --no-gemm \
    --repeats 3 --check-rows 32 --decode-head-dim $d --out-dir $L/$n > $L/$n.log 2>&1
  echo "== $n ($*) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper: .* us" $L/$n.log >> $R
}
run long-512 512 sk32768-d512/contig FLASHCORE_DECODE_TRACE=1
run long-256 256 sk32768-d256/contig FLASHCORE_DECODE_TRACE=1
run spec-256 256 hkv8-sq4-sk8192-d256/contig FLASHCORE_DECODE_TRACE=1
run long-512-s8 512 sk32768-d512/contig FLASHCORE_DECODE_SPLITS=8
python3 $D/timeline.py $L/long-512.log $L/long-256.log $L/spec-256.log >> $R 2>&1
echo "done (${SECONDS}s)" >> $R
tar cJf $OUT/logs.tar.xz -C /tmp logs 2>/dev/null
cat $R
