#!/bin/bash
# The final build's combine on the speculative row at 256 (B=8 Hq=32 Hkv=8 Sq=4 Sk=8192, two
# splits, 1 024 combine blocks) and on the one-sequence row (33 splits, 8 blocks) under Nsight
# Compute: launch statistics, occupancy and duration of the split kernel and the combine, each
# alone (ncu serialises them).
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
N=.carry/xtask; R=$OUT/summary.txt; L=/tmp/logs; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
prof() {  # name case
  timeout 100 ncu --clock-control none --kernel-name regex:attention_decode --launch-skip 4 --launch-count 2 \
    --section LaunchStats --section Occupancy --section SpeedOfLight \
    $N bench-all --suite decode --kernels persistent-hopper --case $2 --no-peers --no-gemm \
    --repeats 1 --check-rows 8 --decode-head-dim 256 --out-dir $L/$1 > $L/$1.ncu.txt 2>&1
  echo "== $1 rc=$? (${SECONDS}s)" >> $R
  grep -E "attention_decode|Duration|Registers Per|Waves Per SM|Grid Size|Block Limit Registers|Achieved Occupancy|Theoretical Occupancy|Memory Throughput" \
    $L/$1.ncu.txt | sed 's/  */ /g' | cut -c1-160 >> $R
}
prof spec sq4-sk8192-d256/contig
prof long sq1-sk32768-d256/contig
echo "done (${SECONDS}s)" >> $R
tar cJf $OUT/logs.tar.xz -C /tmp logs 2>/dev/null
cat $R
