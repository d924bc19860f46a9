#!/bin/bash
# After the combine and epilogue rework (ee6acf9), on nvidia-h200, in one short call:
# 1. Nsight Compute on the e4m3 long row (1,32,8,1,32768,128), contiguous: the split and combine
#    kernels' durations, memory and warp-state sections, and the split kernel's stall samples
#    (../2026-11-30-fp8-schedule-h200/stalls.py);
# 2. graph-replay times of the e4m3 long row under other ring depths (FLASHCORE_DECODE_STAGES)
#    at D = 64, 128 and 256, beside the plan's own (8, 4 and 6 slots).
# Run from the repository root with a stripped release xtask of ee6acf9 in .carry/xtask.
# Writes under $OUT: summary.txt, ncu-e4m3.txt, stalls-e4m3.txt.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/summary.txt; L=/tmp/logs; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
timeout 110 ncu --clock-control none --kernel-name regex:attention_decode --launch-count 2 --set full \
  --import-source no -o /tmp/prof $X bench-all --suite decode --kernels persistent-hopper \
  --case sk32768-d128/e4m3-contig --no-peers --no-gemm --repeats 3 --kv-dtype e4m3 --out-dir $L/ncu > $L/ncu-run.log 2>&1
echo "ncu rc=$? (${SECONDS}s)" >> $R
ncu --import /tmp/prof.ncu-rep --page details --section SpeedOfLight --section LaunchStats \
  --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis > $OUT/ncu-e4m3.txt 2>&1
ncu --import /tmp/prof.ncu-rep --page source --csv --print-source sass --kernel-name attention_decode_split > /tmp/src.csv 2>/tmp/src.err
python3 docs/results/2026-11-30-fp8-schedule-h200/stalls.py /tmp/src.csv > $OUT/stalls-e4m3.txt 2>&1 || head -c 1500 /tmp/src.err >> $OUT/stalls-e4m3.txt
bench() {  # name head_dim [VAR=value ...]
  local name=$1 d=$2; shift 2
  if [ $SECONDS -gt 215 ]; then echo "== $name skipped (${SECONDS}s)" >> $R; return; fi
  env "$@" timeout 40 $X bench-all --suite decode --kernels persistent-hopper --case sk32768 --no-peers \
    --no-gemm --repeats 7 --decode-head-dim $d --kv-dtype e4m3 --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name (D=$d $*) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| graph" $L/$name/bench-decode.md 2>/dev/null | grep e4m3 | cut -d'|' -f2,5 | sed 's/b1-hq32-hkv8-sq1-sk32768-//' >> $R
}
bench d128 128
bench d128-st3 128 FLASHCORE_DECODE_STAGES=3
bench d256 256
bench d256-st4 256 FLASHCORE_DECODE_STAGES=4
bench d64 64
bench d64-st4 64 FLASHCORE_DECODE_STAGES=4
cat $R
echo "== ncu"; grep -E "attention_decode|Duration|DRAM Throughput|Grid Size|Registers Per|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" $OUT/ncu-e4m3.txt | head -24; head -22 $OUT/stalls-e4m3.txt
echo "(${SECONDS}s)"
