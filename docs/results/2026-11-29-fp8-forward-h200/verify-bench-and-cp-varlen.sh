#!/bin/bash
# The e4m3 forward on nvidia-h200-x2 (GPU 0): verify --dtype e4m3 on persistent-hopper, then
# bench-all --suite fp8 (flashcore e4m3 and bf16 beside cuDNN's fp8 SDPA and the e4m3 GEMM, one
# run), the same suite with a 4-deep K/V ring; and, on both GPUs, verify --cp 2 with the packed
# (varlen) cases of context parallelism. Run from the repository root with the release xtask in
# .carry/ and the nvidia-cudnn-frontend wheel in .whl/. Writes under $OUT.
set -u
X=.carry/xtask
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/cudnn-fe .whl/nvidia_cudnn_frontend-1.32.0-*.whl > $OUT/pip.txt 2>&1
nvidia-smi --query-gpu=index,name,clocks.max.sm,power.limit,driver_version --format=csv > $OUT/gpu.txt 2>&1
timeout 150 $X verify --dtype e4m3 --kernels persistent-hopper --cases 300 --seed 11 > $OUT/verify-e4m3.txt 2>&1; echo "rc=$?" >> $OUT/verify-e4m3.txt
timeout 240 $X bench-all --suite fp8 --cudnn-fe-path /tmp/cudnn-fe --out-dir $OUT/fp8 > $OUT/bench-fp8.txt 2>&1; echo "rc=$?" >> $OUT/bench-fp8.txt
FLASHCORE_HOPPER_STAGES=4 timeout 90 $X bench-all --suite fp8 --no-peers --out-dir $OUT/fp8-stages4 > $OUT/bench-fp8-stages4.txt 2>&1; echo "rc=$?" >> $OUT/bench-fp8-stages4.txt
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SP=$(python3 -c "import site; print(site.getsitepackages()[0])")
NCCL=$(find "$SP" -name 'libnccl.so.2' | head -1)
mkdir -p /tmp/nccl && ln -sf "$NCCL" /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:${LD_LIBRARY_PATH:-}
timeout 120 $X verify --cp 2 --cases 60 --seed 777 > $OUT/verify-cp2-varlen.txt 2>&1; echo "rc=$?" >> $OUT/verify-cp2-varlen.txt
grep -E "passed|FAIL|rc=" $OUT/verify-e4m3.txt | tail -8
grep -E "^\|" $OUT/fp8/bench-fp8.md 2>/dev/null | tail -14 || tail -30 $OUT/bench-fp8.txt
grep -E "^\|" $OUT/fp8-stages4/bench-fp8.md 2>/dev/null | tail -8
grep -E "passed|varlen|rc=" $OUT/verify-cp2-varlen.txt | tail -5
