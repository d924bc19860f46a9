#!/bin/bash
# The committed tree's checks on nvidia-h200-x2 (verify --cp 2, reliability --only cp) and the
# million-token row with each rank's time and the single-GPU reference both alone and on every
# GPU at once (FA3's ring attention for this row is in bench-cp-1m.txt of the run before).
# Run from the repository root with the release xtask in .carry/. Writes under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SP=$(python3 -c "import site; print(site.getsitepackages()[0])")
NCCL=$(find "$SP" -name 'libnccl.so.2' | head -1)
mkdir -p /tmp/nccl && ln -sf "$NCCL" /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:${LD_LIBRARY_PATH:-}
X=.carry/xtask
timeout 150 $X verify --cp 2 --cases 40 --seed 4242 > $OUT/final-verify-cp2.txt 2>&1; echo "rc=$?" >> $OUT/final-verify-cp2.txt
timeout 100 $X reliability --only cp > $OUT/final-reliability-cp.txt 2>&1; echo "rc=$?" >> $OUT/final-reliability-cp.txt
(while sleep 5; do nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu --format=csv,noheader; done) > $OUT/final-clocks.txt 2>&1 &
timeout 280 $X bench-all --suite cp --case 1m --no-peers --out-dir $OUT/final-1m > $OUT/final-bench-1m.txt 2>&1; echo "rc=$?" >> $OUT/final-bench-1m.txt
kill %1
grep -E "passed|rc=" $OUT/final-verify-cp2.txt
grep -E "^\| cp|rc=" $OUT/final-reliability-cp.txt
grep -E "causal-1m|rc=" $OUT/final-bench-1m.txt
sort -t, -k1,1 -s $OUT/final-clocks.txt | awk -F, '{print}' | tail -6
