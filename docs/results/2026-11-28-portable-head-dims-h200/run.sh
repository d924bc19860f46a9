#!/usr/bin/env bash
# The portable generation-5 path at every FlashAttention-2 head dim (32, 64, 96, 128, 160, 192,
# 224, 256) on the H200: correctness (verify draws every head dim; reliability and sanitize at
# 96, 192 and 256), then prefill beside tile64 (the slow path these dims took before) and the
# peers, in one call.
# From the repo root, with a stripped release xtask of the tree in .carry/xtask and the
# flash-attn3-jax and einops wheels in .carry/:
#   bash docs/results/2026-11-28-portable-head-dims-h200/run.sh [first|copyfix|pad|final]
# first: all of the above (outputs in first/). copyfix: after the producer's copy walk for rows
# of 12, 20, 24 and 28 chunks, verify (every head dim) and sanitize at those dims, then the bench.
# pad: every multiple of 8 up to 256, padded up to the next instance: verify (both modes),
# sanitize and reliability at padded head dims, then D = 80 and 96 beside the previous fallbacks.
# final: the final tree's kernels (a skipped chunk's source as the exact builds had it): verify at
# every multiple of 8 and sanitize at padded head dims, no bench.
set -u
PHASE=${1:-first}
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/headdims.txt; L=/tmp/logs-headdims; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
P=persistent-portable
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
if [ $PHASE = final ]; then
  job verify 150 $X verify --kernels $P --cases 300 --seed 3007
  job sanitize 150 $X sanitize --pass fwd --kernels $P --head-dims 80,136 --logs $L/san
  wait
  sort $L/rc.txt | tee -a $R
  grep -hE 'passed, .* failed' $L/verify.log | tail -1 | tee -a $R
  grep -hE "^\| (memcheck|racecheck|synccheck|initcheck)|sanitize:" $L/sanitize.log | tee -a $R
  exit 0
elif [ $PHASE = pad ]; then
  job verify 330 $X verify --kernels $P --cases 800 --seed 3005
  job verify-bi 330 $X verify --kernels $P --batch-invariant --cases 300 --seed 3006
  job sanitize 330 $X sanitize --pass fwd --kernels $P --head-dims 80,136 --logs $L/san
  (timeout 250 $X reliability --kernels $P --head-dims 80 --only badinput,oob,determinism,nonfinite,modes,batchinv,streams --determinism-runs 50 --persistent-runs 50 --streams-iterations 100 > $L/reliability-d80.log 2>&1
   echo "reliability D=80 rc=$? (${SECONDS}s)" >> $L/rc.txt) &
elif [ $PHASE = copyfix ]; then
  job verify 330 $X verify --kernels $P --cases 500 --seed 3003
  job sanitize 330 $X sanitize --pass fwd --kernels $P --head-dims 96,160,192,224 --logs $L/san
else
job verify 330 $X verify --kernels $P --cases 800 --seed 3001
job verify-bi 330 $X verify --kernels $P --batch-invariant --cases 300 --seed 3002
job sanitize 330 $X sanitize --pass fwd --kernels $P --head-dims 96,192,256 --logs $L/san
(for d in 96 192 256; do
  timeout 200 $X reliability --kernels $P --head-dims $d --only badinput,oob,determinism,nonfinite,modes,batchinv,streams --determinism-runs 50 --persistent-runs 50 --streams-iterations 100 > $L/reliability-d$d.log 2>&1
  echo "reliability D=$d rc=$? (${SECONDS}s)" >> $L/rc.txt
done) &
fi
python3 -m pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-*.whl .carry/einops-*.whl > $L/pip.log 2>&1
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -2 | tr '\n' ' ')" | tee -a $R; done
grep -hE "^\| [a-z]+ \| " $L/reliability-d*.log | cut -c1-200 | tee -a $R
grep -hE "FAIL|reliability:|panicked" $L/reliability-d*.log | cut -c1-500 | head -12 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
SH=""; for d in 32 96 160 192 224 256; do SH="$SH --shape 4,16,2048,$d"; done
BK=tile64,$P
if [ $PHASE = pad ]; then SH="--shape 4,16,2048,80 --shape 4,16,2048,96"; BK=vectorized,tile64,$P; fi
timeout 240 $X bench-all $SH --kernels $BK --fa3-path /tmp/fa3pkg --out-dir $L/bench > $L/bench.log 2>&1; echo "bench rc=$? (${SECONDS}s)" | tee -a $R
cp $L/bench/bench-all.md $OUT/bench-head-dims.md 2>/dev/null
grep -E "^\| " $L/bench/bench-all.md | head -40 | tee -a $R
echo "(${SECONDS}s)" | tee -a $R
(cd /tmp && tar cJf $OUT/logs-headdims.tar.xz logs-headdims)
