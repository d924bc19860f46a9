#!/bin/bash
# The decode kernel's one-sequence long row (1,32,8,1,32768) on nvidia-h200: where its time goes.
# 1. graph-replay times of the row (bf16 and e4m3 caches, contiguous and paged 64) at head dims
#    128, 256 and 512 under forced split counts and ring depths (FLASHCORE_DECODE_SPLITS/STAGES);
# 2. Nsight Compute on the row's split and combine kernels (bf16 and e4m3 contiguous, D = 128):
#    durations, memory and warp-state sections, and the split kernel's stall samples (stalls.py).
# Run from the repository root with a stripped release xtask of the tree in .carry/xtask.
# Writes under $OUT: summary.txt, ncu-*.txt, stalls-*.txt, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
D=docs/results/2026-11-30-decode-long-row-h200
X=.carry/xtask; R=$OUT/summary.txt; L=/tmp/logs; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name head_dim [VAR=value ...]
  local name=$1 d=$2; shift 2
  if [ $SECONDS -gt 500 ]; then echo "== $name skipped (${SECONDS}s)" >> $R; return; fi
  env "$@" timeout 80 $X bench-all --suite decode --kernels persistent-hopper --case sk32768 --no-peers \
    --no-gemm --repeats 7 --decode-head-dim $d --kv-dtype e4m3 --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name (D=$d $*) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| graph" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,5 | sed 's/b1-hq32-hkv8-sq1-sk32768-//' >> $R
  grep -E "read probe|copy" $L/$name/bench-decode.md 2>/dev/null | grep -E "^\| b1" | cut -c1-200 | head -4 >> $R
}
for c in contig e4m3-contig; do
  timeout 150 ncu --clock-control none --kernel-name regex:attention_decode --launch-count 2 --set full \
    --import-source no -o /tmp/prof-$c $X bench-all --suite decode --kernels persistent-hopper \
    --case sk32768-d128/$c --no-peers --no-gemm --repeats 3 --kv-dtype e4m3 --out-dir $L/ncu-$c > $L/ncu-run-$c.log 2>&1
  echo "ncu $c rc=$? (${SECONDS}s)" >> $R
  ncu --import /tmp/prof-$c.ncu-rep --page details --section SpeedOfLight --section LaunchStats \
    --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis > $OUT/ncu-$c.txt 2>&1
  ncu --import /tmp/prof-$c.ncu-rep --page source --csv --print-source sass --kernel-name attention_decode_split > /tmp/src-$c.csv 2>/tmp/src-$c.err
  python3 docs/results/2026-11-30-fp8-schedule-h200/stalls.py /tmp/src-$c.csv > $OUT/stalls-$c.txt 2>&1 || { head -c 2000 /tmp/src-$c.csv; cat /tmp/src-$c.err; } >> $OUT/stalls-$c.txt
done
bench d128 128
for s in 8 33; do bench d128-s$s 128 FLASHCORE_DECODE_SPLITS=$s; done
for st in 2 4; do bench d128-st$st 128 FLASHCORE_DECODE_STAGES=$st; done
bench d128-nopdl 128 FLASHCORE_DECODE_PDL=0
bench d256 256
bench d256-s33 256 FLASHCORE_DECODE_SPLITS=33
bench d512 512
bench d512-s33 512 FLASHCORE_DECODE_SPLITS=33
(cd /tmp && tar cJf $OUT/logs.tar.xz logs)
cat $R
for c in contig e4m3-contig; do echo "== ncu $c"; grep -E "attention_decode|Duration|DRAM Throughput|Memory Throughput|Grid Size|Registers Per|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Eligible Warps" $OUT/ncu-$c.txt | head -40; head -25 $OUT/stalls-$c.txt; done
echo "(${SECONDS}s)"
