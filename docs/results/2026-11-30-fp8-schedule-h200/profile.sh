#!/bin/bash
# Where the e4m3 forward's warps wait, on nvidia-h200: Nsight Compute (full set, SASS-level warp
# stall sampling) on the first e4m3 attention launch of bench-all --suite fp8 at (8,32,4096,128),
# not causal, for the committed schedule (.carry/v/xtask0) and the deferred rescale (xtask2;
# variants.sh says what each is), summarised by stalls.py. Run from the repository root.
# Writes under $OUT: stalls-vN.txt and details-vN.txt.
set -u
D=docs/results/2026-11-30-fp8-schedule-h200
for v in 0 2; do
  timeout 200 ncu --clock-control none --kernel-name regex:attention_persistent_hopper --launch-count 1 --set full \
    --import-source no -o /tmp/prof$v .carry/v/xtask$v bench-all --suite fp8 --no-peers --case s4096 --causal off \
    --repeats 3 --out-dir /tmp/bench$v > /tmp/ncu-run$v.txt 2>&1; echo "ncu rc=$?" > $OUT/details-v$v.txt
  tail -3 /tmp/ncu-run$v.txt >> $OUT/details-v$v.txt
  ncu --import /tmp/prof$v.ncu-rep --page details --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section ComputeWorkloadAnalysis >> $OUT/details-v$v.txt 2>&1
  ncu --import /tmp/prof$v.ncu-rep --page source --csv --print-source sass > /tmp/src$v.csv 2>/tmp/src$v.err
  python3 $D/stalls.py /tmp/src$v.csv > $OUT/stalls-v$v.txt 2>&1 || { head -c 3000 /tmp/src$v.csv; cat /tmp/src$v.err; } >> $OUT/stalls-v$v.txt
done
for v in 0 2; do echo "== v$v"; grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Active Warps Per Sch|Eligible Warps" $OUT/details-v$v.txt | head -8; head -40 $OUT/stalls-v$v.txt; done
