#!/bin/bash
# Timeline of the decode kernel on the long row (FLASHCORE_DECODE_TRACE=1, each
# split CTA of launches 40 and 41 of a module prints its stamps; common/decode_trace.cuh): D = 512, 256,
# 128 contiguous, (8,32,8,1,8192) at D = 512 (two splits a unit, 93 % of the probe) beside, and
# the long row at D = 256 in 33 splits a unit (264 CTAs, two rounds).
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1 FLASHCORE_DECODE_TRACE=1
X=.carry/xtask; R=$OUT/summary.txt; L=$OUT/logs; mkdir -p $L
D=docs/results/2026-12-01-decode-one-sequence-h200
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
for c in sk32768-d512/contig:512 sk32768-d256/contig:256 sk32768-d128/contig:128 b8-hq32-hkv8-sq1-sk8192-d512/contig:512 sk32768-d256/contig:256:33; do
  s=${c##*:}; c=${c%:33}; n=$(echo ${c%:*} | tr '/' '-'); split=()
  if [ "$s" = 33 ]; then n=$n-s33; split=(FLASHCORE_DECODE_SPLITS=33); fi
  env "${split[@]}" timeout 60 $X bench-all --suite decode --kernels persistent-hopper --case ${c%:*} --no-peers --no-gemm --repeats 3 \
    --decode-head-dim ${c#*:} --out-dir $L/$n > $L/$n.log 2>&1
  echo "== $n rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| (graph|eager)" $L/$n/bench-decode.md 2>/dev/null | cut -d'|' -f2,4,5 >> $R
  python3 $D/timeline.py $L/$n.log >> $R 2>&1
done
cat $R
