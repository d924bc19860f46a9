#!/bin/bash
# Nsight Compute on the e4m3 forward at (8,32,4096,128), not causal, on nvidia-h200: the
# bench's first e4m3 call (V's transpose, then the e4m3 build) and the bf16 build beside it.
# Run from the repository root with the release xtask in .carry/. Writes under $OUT.
set -u
X=.carry/xtask
timeout 400 ncu --clock-control none --kernel-name regex:"transpose_v_e4m3|attention_persistent_hopper" --launch-count 4 --set full -o $OUT/e4m3 \
  $X bench-all --suite fp8 --no-peers --case s4096 --causal off --out-dir $OUT/bench > $OUT/ncu-run.txt 2>&1; echo "rc=$?" >> $OUT/ncu-run.txt
ncu --import $OUT/e4m3.ncu-rep --page details --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy > $OUT/details.txt 2>&1
ncu --import $OUT/e4m3.ncu-rep --page raw --csv --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,smsp__average_warp_latency_issue_stalled_barrier,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed > $OUT/raw.csv 2>&1
tail -3 $OUT/ncu-run.txt
cat $OUT/raw.csv | cut -c1-400
grep -E "^  [a-z_]+|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Warp Cycles Per Issued|Stall|Executed Ipc|Registers Per|No Eligible" $OUT/details.txt | head -80
