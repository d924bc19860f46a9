#!/bin/bash
# Context parallelism on nvidia-h200-x2: verify --cp 2, reliability --only cp (kill a rank,
# determinism), and the bench rows up to 256k tokens. Run from the repository root with the
# release xtask in .carry/. Writes under $OUT.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SP=$(python3 -c "import site; print(site.getsitepackages()[0])")
NCCL=$(find "$SP" -name 'libnccl.so.2' | head -1)
mkdir -p /tmp/nccl && ln -sf "$NCCL" /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:${LD_LIBRARY_PATH:-}
X=.carry/xtask
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nvidia-smi topo -m; echo "libnccl: $NCCL"; } > $OUT/machine.txt 2>&1
timeout 300 $X verify --cp 2 --cases 40 > $OUT/verify-cp2.txt 2>&1; echo "verify rc=$?" >> $OUT/verify-cp2.txt
timeout 200 $X reliability --only cp > $OUT/reliability-cp.txt 2>&1; echo "reliability rc=$?" >> $OUT/reliability-cp.txt
timeout 150 $X bench-all --suite cp --case 256k --case 128k --out-dir $OUT/bench > $OUT/bench-cp-small.txt 2>&1; echo "bench rc=$?" >> $OUT/bench-cp-small.txt
head -12 $OUT/machine.txt
grep -E "^(ok|FAIL)|passed|rc=|error" $OUT/verify-cp2.txt | tail -60
tail -8 $OUT/reliability-cp.txt
tail -20 $OUT/bench-cp-small.txt
