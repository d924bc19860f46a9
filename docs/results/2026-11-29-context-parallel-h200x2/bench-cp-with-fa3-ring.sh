#!/bin/bash
# bench-all --suite cp on nvidia-h200-x2 with flash-attn3-jax's ring attention as the peer in the
# same run: the rows up to 256k tokens, then the million-token causal row. Run from the
# repository root with the release xtask in .carry/ and the wheels in .carry/whl/.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .carry/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
SP=$(python3 -c "import site; print(site.getsitepackages()[0])")
NCCL=$(find "$SP" -name 'libnccl.so.2' | head -1)
mkdir -p /tmp/nccl && ln -sf "$NCCL" /tmp/nccl/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl:${LD_LIBRARY_PATH:-}
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" > $OUT/jax.txt 2>&1
X=.carry/xtask
timeout 250 $X bench-all --suite cp --case 256k --case 128k --out-dir $OUT/small > $OUT/bench-cp-small.txt 2>&1; echo "rc=$?" >> $OUT/bench-cp-small.txt
timeout 300 $X bench-all --suite cp --case 1m --out-dir $OUT/1m > $OUT/bench-cp-1m.txt 2>&1; echo "rc=$?" >> $OUT/bench-cp-1m.txt
cat $OUT/jax.txt
grep -E "^\|" $OUT/small/bench-cp.md 2>/dev/null || tail -30 $OUT/bench-cp-small.txt
grep -E "^\|" $OUT/1m/bench-cp.md 2>/dev/null || tail -30 $OUT/bench-cp-1m.txt
grep -E "rc=|rror" $OUT/bench-cp-*.txt | head -20
