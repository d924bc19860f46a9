#!/bin/bash
# The e4m3 forward on nvidia-h200, after the fp8 reference took its scores in bf16 (3a05894):
# verify --dtype e4m3 on persistent-hopper with two seeds, then bench-all --suite fp8 without
# peers under the Hopper build's knobs (FLASHCORE_HOPPER_*), to pick the e4m3 default.
# Run from the repository root with the release xtask in .carry/. Writes under $OUT.
set -u
X=.carry/xtask
nvidia-smi --query-gpu=index,name,clocks.max.sm,power.limit,driver_version --format=csv > $OUT/gpu.txt 2>&1
timeout 120 $X verify --dtype e4m3 --kernels persistent-hopper --cases 300 --seed 11 > $OUT/verify-e4m3-seed11.txt 2>&1; echo "rc=$?" >> $OUT/verify-e4m3-seed11.txt
timeout 120 $X verify --dtype e4m3 --kernels persistent-hopper --cases 300 --seed 12 > $OUT/verify-e4m3-seed12.txt 2>&1; echo "rc=$?" >> $OUT/verify-e4m3-seed12.txt
mkdir -p $OUT/variants
for v in default PINGPONG=0 STAGES=3 CONSUMER_REGS=240 Q_STAGES=1 DYNAMIC=1; do
  if [ $v = default ]; then env=""; else env="FLASHCORE_HOPPER_$v"; fi
  env $env timeout 80 $X bench-all --suite fp8 --no-peers --out-dir $OUT/variants/$v > $OUT/variants/$v.txt 2>&1 || echo "$v failed" >> $OUT/variants/failed.txt
done
grep -E "passed|rc=" $OUT/verify-e4m3-seed1*.txt | tail -6
grep -h "FAIL" $OUT/verify-e4m3-seed1*.txt | grep -o "O err.*" | head -8
for v in default PINGPONG=0 STAGES=3 CONSUMER_REGS=240 Q_STAGES=1 DYNAMIC=1; do echo "== $v"; grep -E "^\| [0-9]" $OUT/variants/$v/bench-fp8.md 2>/dev/null | tail -4 | cut -d"|" -f2-5; done
