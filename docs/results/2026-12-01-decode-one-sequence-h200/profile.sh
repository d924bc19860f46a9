#!/bin/bash
# The decode kernel's one-sequence long row (1,32,8,1,32768) at D = 256 and 512 on the H200:
# graph-replay times against the read probe under split counts 6..16 (how the rate depends on
# the CTA count), and Nsight Compute on the split and combine kernels (contiguous cache).
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/summary.txt; L=/tmp/logs; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name head_dim [VAR=value ...]
  local name=$1 d=$2; shift 2
  if [ $SECONDS -gt 420 ]; then echo "== $name skipped (${SECONDS}s)" >> $R; return; fi
  env "$@" timeout 80 $X bench-all --suite decode --kernels persistent-hopper --case sk32768 --no-peers \
    --no-gemm --repeats 7 --decode-head-dim $d --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name (D=$d $*) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| graph" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,5 | sed 's/b1-hq32-hkv8-sq1-sk32768-//' >> $R
  grep -E "read probe|copy" $L/$name/bench-decode.md 2>/dev/null | grep -E "^\| " | cut -c1-160 | head -6 >> $R
}
bench d512 512
bench d256 256
for s in 6 8 12; do bench d512-s$s 512 FLASHCORE_DECODE_SPLITS=$s; done
for s in 8 12; do bench d256-s$s 256 FLASHCORE_DECODE_SPLITS=$s; done
for d in 512 256; do
  c=sk32768-d$d/contig
  timeout 120 ncu --clock-control none --kernel-name regex:attention_decode --launch-count 2 --set full \
    --import-source no -o /tmp/prof-$d $X bench-all --suite decode --kernels persistent-hopper \
    --case $c --decode-head-dim $d --no-peers --no-gemm --repeats 3 --out-dir $L/ncu-$d > $L/ncu-run-$d.log 2>&1
  echo "ncu $d rc=$? (${SECONDS}s)" >> $R
  ncu --import /tmp/prof-$d.ncu-rep --page details --section SpeedOfLight --section LaunchStats \
    --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis > $OUT/ncu-$d.txt 2>&1
  grep -E "attention_decode|Duration|DRAM Throughput|Memory Throughput" $OUT/ncu-$d.txt >> $R
done
tar cJf $OUT/logs.tar.xz -C /tmp logs 2>/dev/null
cat $R
