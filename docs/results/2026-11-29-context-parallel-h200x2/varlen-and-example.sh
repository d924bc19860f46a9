#!/bin/bash
# Packed (varlen) sequences across the ranks and the example program, on nvidia-h200-x2:
# verify --cp 2 with a new seed (its edge list and random draw include varlen cases), then
# `examples/ring.rs` at 65536 rows a GPU. Run from the repository root with the release xtask
# and example in .carry/. Writes under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SP=$(python3 -c "import site; print(site.getsitepackages()[0])")
NCCL=$(find "$SP" -name 'libnccl.so.2' | head -1)
mkdir -p /tmp/nccl && ln -sf "$NCCL" /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:${LD_LIBRARY_PATH:-}
timeout 150 .carry/xtask verify --cp 2 --cases 60 --seed 777 > $OUT/varlen-verify-cp2.txt 2>&1; echo "rc=$?" >> $OUT/varlen-verify-cp2.txt
timeout 60 .carry/ring 65536 > $OUT/example-ring.txt 2>&1; echo "rc=$?" >> $OUT/example-ring.txt
grep -E "varlen|passed|FAIL|rc=" $OUT/varlen-verify-cp2.txt | tail -25
cat $OUT/example-ring.txt
