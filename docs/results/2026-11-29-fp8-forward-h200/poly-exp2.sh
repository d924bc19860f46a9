#!/bin/bash
# The e4m3 build with part of its exponentials on the FMA pipe (FC_HOPPER_EXP2_POLY, default 1 of
# every 4 blocks), on nvidia-h200: verify --dtype e4m3 at the default (two seeds) and at 2, then
# bench-all --suite fp8 with cuDNN's fp8 SDPA at the default and at 2, and without peers at 0.
# Run from the repository root with the release xtask in .carry/ and the nvidia-cudnn-frontend
# wheel in .whl/. Writes under $OUT.
set -u
X=.carry/xtask
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/cudnn-fe .whl/nvidia_cudnn_frontend-1.32.0-*.whl > $OUT/pip.txt 2>&1
nvidia-smi --query-gpu=index,name,clocks.max.sm,power.limit,driver_version --format=csv > $OUT/gpu.txt 2>&1
timeout 100 $X verify --dtype e4m3 --kernels persistent-hopper --cases 300 --seed 21 > $OUT/verify-poly1-seed21.txt 2>&1; echo "rc=$?" >> $OUT/verify-poly1-seed21.txt
timeout 100 $X verify --dtype e4m3 --kernels persistent-hopper --cases 300 --seed 22 > $OUT/verify-poly1-seed22.txt 2>&1; echo "rc=$?" >> $OUT/verify-poly1-seed22.txt
FLASHCORE_HOPPER_EXP2_POLY=2 timeout 100 $X verify --dtype e4m3 --kernels persistent-hopper --cases 300 --seed 23 > $OUT/verify-poly2-seed23.txt 2>&1; echo "rc=$?" >> $OUT/verify-poly2-seed23.txt
timeout 200 $X bench-all --suite fp8 --cudnn-fe-path /tmp/cudnn-fe --out-dir $OUT/poly1 > $OUT/bench-poly1.txt 2>&1; echo "rc=$?" >> $OUT/bench-poly1.txt
FLASHCORE_HOPPER_EXP2_POLY=2 timeout 200 $X bench-all --suite fp8 --cudnn-fe-path /tmp/cudnn-fe --out-dir $OUT/poly2 > $OUT/bench-poly2.txt 2>&1; echo "rc=$?" >> $OUT/bench-poly2.txt
FLASHCORE_HOPPER_EXP2_POLY=0 timeout 80 $X bench-all --suite fp8 --no-peers --out-dir $OUT/poly0 > $OUT/bench-poly0.txt 2>&1; echo "rc=$?" >> $OUT/bench-poly0.txt
grep -hE "passed|rc=" $OUT/verify-poly*.txt | grep -v "^|" | tail -9
grep -h "FAIL" $OUT/verify-poly*.txt | head -4 | cut -c1-300
for v in poly1 poly2 poly0; do echo "== $v"; grep -E "^\| [0-9].* (full|causal) " $OUT/$v/bench-fp8.md 2>/dev/null | tail -4; done
