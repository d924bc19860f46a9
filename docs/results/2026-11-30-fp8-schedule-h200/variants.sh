#!/bin/bash
# The e4m3 forward's consumer schedule, on nvidia-h200: four builds of the e4m3 kernel, one xtask
# each (.carry/v/xtaskN, built with FC_HOPPER_E4M3_SCHED=N as the default in config.cuh):
#   0 the committed schedule (O's rescale and P's packing after the PV wait),
#   1 the row max and sum in four partial chains a row,
#   2 O's rescale deferred to the next tile (no wgmma wait inside the softmax; P in two register sets),
#   3 both.
# verify --dtype e4m3 on 2 and 3, then bench-all --suite fp8 without peers on each build, and with
# a 3-deep K/V ring on 2 and 3. Run from the repository root. Writes under $OUT.
set -u
nvidia-smi --query-gpu=index,name,clocks.max.sm,power.limit,driver_version --format=csv > $OUT/gpu.txt 2>&1
for v in 2 3; do
  timeout 110 .carry/v/xtask$v verify --dtype e4m3 --kernels persistent-hopper --cases 120 --seed 3$v > $OUT/verify-v$v.txt 2>&1; echo "rc=$?" >> $OUT/verify-v$v.txt
done
for run in 0 1 2 3 2s3 3s3; do
  v=${run:0:1}; env=""
  [ ${#run} -gt 1 ] && env="FLASHCORE_HOPPER_STAGES=3"
  env $env timeout 75 .carry/v/xtask$v bench-all --suite fp8 --no-peers --out-dir $OUT/v$run > $OUT/bench-v$run.txt 2>&1; echo "rc=$?" >> $OUT/bench-v$run.txt
done
grep -hE "passed|rc=" $OUT/verify-v*.txt | grep -v "^|" | tail -6
grep -h "FAIL" $OUT/verify-v*.txt | head -4 | cut -c1-300
for run in 0 1 2 3 2s3 3s3; do echo "== v$run"; grep -E "^\| [0-9].* (no|yes) " $OUT/v$run/bench-fp8.md 2>/dev/null | cut -d"|" -f2-9 || tail -3 $OUT/bench-v$run.txt; done
