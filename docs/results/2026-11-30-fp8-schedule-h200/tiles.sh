#!/bin/bash
# The e4m3 forward with 192-key tiles, on nvidia-h200: two xtask builds of one tree
# (.carry/v/xtask0: the committed softmax; xtask1: the row max as a tree and the row sum in four
# partial sums, FC_HOPPER_E4M3_SCHED=1), each planning 192-key tiles unless
# FLASHCORE_HOPPER_E4M3_BLOCK_N=128 asks for the old tile. verify --dtype e4m3 on both at 192,
# bench-all --suite fp8 without peers on the four combinations, then the suite with cuDNN's fp8
# SDPA and the GEMM rates on xtask0 at 192. Run from the repository root with the builds in
# .carry/v/ and the nvidia-cudnn-frontend wheel in .whl/. Writes under $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/cudnn-fe .whl/nvidia_cudnn_frontend-1.32.0-*.whl > /tmp/pip.txt 2>&1
nvidia-smi --query-gpu=index,name,clocks.max.sm,power.limit,driver_version --format=csv > $OUT/gpu.txt 2>&1
timeout 120 .carry/v/xtask0 verify --dtype e4m3 --kernels persistent-hopper --cases 240 --seed 41 > $OUT/verify-x0-n192.txt 2>&1; echo "rc=$?" >> $OUT/verify-x0-n192.txt
timeout 100 .carry/v/xtask1 verify --dtype e4m3 --kernels persistent-hopper --cases 160 --seed 42 > $OUT/verify-x1-n192.txt 2>&1; echo "rc=$?" >> $OUT/verify-x1-n192.txt
for run in x0-n128 x0-n192 x1-n192 x1-n128; do
  x=${run:1:1}; n=${run:4:3}
  FLASHCORE_HOPPER_E4M3_BLOCK_N=$n timeout 75 .carry/v/xtask$x bench-all --suite fp8 --no-peers --out-dir /tmp/b-$run > /tmp/bench-$run.txt 2>&1
  echo "rc=$?" >> /tmp/bench-$run.txt
  cp /tmp/b-$run/bench-fp8.md $OUT/bench-$run.md 2>/dev/null || tail -5 /tmp/bench-$run.txt > $OUT/bench-$run.md
done
timeout 200 .carry/v/xtask0 bench-all --suite fp8 --cudnn-fe-path /tmp/cudnn-fe --out-dir /tmp/b-peers > /tmp/bench-peers.txt 2>&1; echo "rc=$?" >> /tmp/bench-peers.txt
cp /tmp/b-peers/bench-fp8.md $OUT/bench-x0-n192-peers.md 2>/dev/null || tail -5 /tmp/bench-peers.txt > $OUT/bench-x0-n192-peers.md
grep -hE "passed|rc=" $OUT/verify-x*.txt | grep -v "^|" | tail -6
grep -h "FAIL" $OUT/verify-x*.txt | head -4 | cut -c1-300
for run in x0-n128 x0-n192 x1-n192 x1-n128; do echo "== $run"; grep -E "^\| [0-9].* (no|yes) " $OUT/bench-$run.md | cut -d"|" -f2-9; done
echo "== x0-n192 with peers"; grep -E "^\| [0-9].* (no|yes) " $OUT/bench-x0-n192-peers.md | cut -d"|" -f2-12
