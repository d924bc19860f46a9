#!/bin/bash
# Timeline of the decode kernel on the long row (1,32,8,1,32768) with an e4m3 cache
# (FLASHCORE_DECODE_TRACE=1, common/decode_trace.cuh; the plan's 2 CTAs an SM, 33 splits a KV
# head, 264 CTAs in one round): D = 128 and 256, contiguous and paged (block 64).
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1 FLASHCORE_DECODE_TRACE=1
X=.carry/xtask; R=$OUT/summary.txt; L=$OUT/logs; mkdir -p $L
D=docs/results/2026-12-01-decode-one-sequence-h200
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
for c in sk32768-d128/e4m3-contig:128 sk32768-d128/e4m3-paged-64:128 sk32768-d256/e4m3-contig:256; do
  n=$(echo ${c%:*} | tr '/' '-')
  timeout 60 $X bench-all --suite decode --kernels persistent-hopper --case ${c%:*} --no-peers --no-gemm --repeats 3 \
    --kv-dtype e4m3 --decode-head-dim ${c#*:} --out-dir $L/$n > $L/$n.log 2>&1
  echo "== $n rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| (graph|eager)" $L/$n/bench-decode.md 2>/dev/null | cut -d'|' -f2,4,5 >> $R
  python3 $D/timeline.py $L/$n.log >> $R 2>&1
done
cat $R
