#!/bin/bash
# The varlen cases of verify --cp on one H200 (world 1: both zig-zag parts on one GPU, so the
# packed copies, blocks and merges run, without NCCL traffic), when no two-GPU machine could
# be started. Run from the repository root with the release xtask in .carry/.
set -u
export NCCL_NVLS_ENABLE=0
SP=$(python3 -c "import site; print(site.getsitepackages()[0])")
NCCL=$(find "$SP" -name 'libnccl.so.2' | head -1)
mkdir -p /tmp/nccl && ln -sf "$NCCL" /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:${LD_LIBRARY_PATH:-}
timeout 100 .carry/xtask verify --cp 1 --cases 60 --seed 777 > $OUT/varlen-verify-cp1.txt 2>&1; echo "rc=$?" >> $OUT/varlen-verify-cp1.txt
grep -E "varlen|passed|FAIL|rc=" $OUT/varlen-verify-cp1.txt | cut -c1-160 | tail -25
