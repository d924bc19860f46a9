#!/usr/bin/env bash
# flashcore-candle's train_packed example (crates/candle/examples/train_packed.rs) on the GPU:
# a small decoder trained on packed varlen batches with a causal sliding window, its first
# steps' gradients checked against candle's own attention, both timed. From the repo root, with
# .carry/ex/train_packed.gz (the example built --release --features cuda, stripped):
#   bash docs/results/2026-11-30-hopper-bwd-modes-h200/train.sh [ARGS...]
# Output in $OUT/train: train.log.
set -u
NV=$(python3 -c "import nvidia; print(list(nvidia.__path__)[0])" 2>/dev/null)
LIBS=$(find $NV -name "lib*.so*" -printf "%h\n" 2>/dev/null | sort -u | tr '\n' ':')/usr/local/cuda/lib64
gunzip -c .carry/ex/train_packed.gz > /tmp/train_packed && chmod +x /tmp/train_packed
mkdir -p $OUT/train
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/train/train.log
LD_LIBRARY_PATH=$LIBS:${LD_LIBRARY_PATH:-} timeout 300 /tmp/train_packed "$@" >> $OUT/train/train.log 2>&1
echo "train_packed rc=$?" | tee -a $OUT/train/train.log
tail -12 $OUT/train/train.log
