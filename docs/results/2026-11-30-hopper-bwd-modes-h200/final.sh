#!/usr/bin/env bash
# The Hopper backward with modes, last call of the day:
# - verify --pass bwd --cases 1000 of persistent-hopper (every mode it claims drawn);
# - then, alone on the GPU: the dense backward of this tree against the one before the modes work
#   (0b0d276, .carry/xtask-base) on the ladder shapes, bench-all --pass bwd without peers, each
#   twice, interleaved; and the candle training example (.carry/ex/train_packed.gz), which trains
#   a small decoder on packed varlen batches with a sliding window, checks its first steps'
#   gradients against candle's own attention and times both.
# From the repo root, with .carry/xtask and .carry/xtask-base (stripped release xtasks of this tree
# and of 0b0d276) and .carry/ex/train_packed.gz:
#   bash docs/results/2026-11-30-hopper-bwd-modes-h200/final.sh
# Outputs in $OUT/final: summary.txt, bench-*.md, train.log, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
O=$OUT/final; mkdir -p $O
X=.carry/xtask; XB=.carry/xtask-base; R=$O/summary.txt; L=/tmp/logs-final; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
timeout 330 $X verify --pass bwd --kernels $H --cases 1000 --seed 4031 > $L/verify-1000.log 2>&1
echo "verify-1000 rc=$? (${SECONDS}s)" | tee -a $R
echo "$(grep -E 'passed, .* failed' $L/verify-1000.log | tail -1)" | tee -a $R
grep -hE "FAIL|panicked" $L/verify-1000.log | cut -c1-500 | head -12 | tee -a $R
S="--shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
for rep in 1 2; do
  for v in base tree; do
    B=$X; [ $v = base ] && B=$XB
    timeout 90 $B bench-all --pass bwd --kernels $H --no-peers --no-fa3 $S --out-dir $L/bench-$v-$rep > $L/bench-$v-$rep.log 2>&1
    echo "bench $v rep $rep rc=$? (${SECONDS}s)" | tee -a $R
    cp $L/bench-$v-$rep/*.md $O/bench-$v-$rep.md 2>/dev/null
  done
done
NV=$(python3 -c "import nvidia; print(list(nvidia.__path__)[0])" 2>/dev/null)
LIBS=$(find $NV -name "lib*.so*" -printf "%h\n" 2>/dev/null | sort -u | tr '\n' ':')/usr/local/cuda/lib64
if [ -f .carry/ex/train_packed.gz ]; then
  gunzip -c .carry/ex/train_packed.gz > /tmp/train_packed && chmod +x /tmp/train_packed
  LD_LIBRARY_PATH=$LIBS:${LD_LIBRARY_PATH:-} timeout $((590 - SECONDS)) /tmp/train_packed > $O/train.log 2>&1
  echo "train_packed rc=$? (${SECONDS}s)" | tee -a $R
fi
(cd /tmp && tar cJf $O/logs.tar.xz logs-final)
for f in $O/bench-*.md; do echo "== $(basename $f)"; grep -E "^\| " $f | head -12; done | tee -a $R
tail -25 $O/train.log 2>/dev/null | tee -a $R
echo "done (${SECONDS}s)" | tee -a $R
