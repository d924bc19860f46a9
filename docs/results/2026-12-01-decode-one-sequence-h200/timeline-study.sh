#!/bin/bash
# Timeline of the decode kernel on the long row (FLASHCORE_DECODE_TRACE=1, a study build: each
# split CTA of launches 40 and 41 of a module prints its stamps; .carry/xtask-tr): D = 512, 256,
# 128 contiguous, and (8,32,8,1,8192) at D = 512 (two splits a unit, 93 % of the probe) beside.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1 FLASHCORE_DECODE_TRACE=1
X=.carry/xtask-tr; R=$OUT/summary.txt; L=$OUT/logs; mkdir -p $L
D=docs/results/2026-12-01-decode-one-sequence-h200
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
for c in sk32768-d512/contig:512 sk32768-d256/contig:256 sk32768-d128/contig:128 b8-hq32-hkv8-sq1-sk8192-d512/contig:512; do
  n=$(echo ${c%:*} | tr '/' '-')
  timeout 60 $X bench-all --suite decode --kernels persistent-hopper --case ${c%:*} --no-peers --no-gemm --repeats 3 \
    --decode-head-dim ${c#*:} --out-dir $L/$n > $L/$n.log 2>&1
  echo "== $n rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| (graph|eager)" $L/$n/bench-decode.md 2>/dev/null | cut -d'|' -f2,4,5 >> $R
  python3 $D/timeline.py $L/$n.log >> $R 2>&1
done
cat $R
