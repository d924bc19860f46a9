#!/usr/bin/env bash
# The narrow D = 32 build of the Hopper forward and the decode kernel's build per cache kind, on
# nvidia-h200, in one call: the checks side by side (verify of the narrow build, forced split and
# three warpgroups, batch-invariant; verify of the decode kernel on 16-bit and e4m3 caches;
# sanitize and reliability at D = 32), then, alone on the GPU, prefill at D = 32 and 64 beside
# tile64 and the peers, the narrow build against the 64 build it replaces
# (FLASHCORE_HOPPER_NARROW_HEAD=0), and the decode suite's Sq = 1 and speculative rows (bf16 and
# e4m3, contiguous and paged 64) for the tree before (.carry/xtask-base, main at 5c4fb0f) and after.
# From the repo root with stripped release xtasks in .carry/ and the FA3 wheels in .carry/fa3.
# Writes under $OUT: call1.txt (the summary), bench-*.md, logs-call1.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; B=.carry/xtask-base; R=$OUT/call1.txt; L=/tmp/logs-call1; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
P=persistent-hopper; N=8,16,24,32
job() { # label timeout [VAR=value ...] cmd...
  local label=$1 t=$2; shift 2
  (env FLASHCORE_CACHE_DIR=/tmp/fc-$label timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job v-narrow 260 $X verify --kernels $P --head-dims $N --cases 400 --seed 6101
job v-split 260 FLASHCORE_HOPPER_SPLITS=3 $X verify --kernels $P --head-dims $N --cases 150 --no-edge --seed 6102
job v-3wg 260 FLASHCORE_HOPPER_CONSUMER_WGS=3 $X verify --kernels $P --head-dims $N --cases 150 --no-edge --seed 6103
job v-bi 260 $X verify --kernels $P --head-dims $N --batch-invariant --cases 200 --seed 6104
job v-decode 260 FLASHCORE_DECODE=force $X verify --kernels $P --cases 300 --seed 6105
job v-decode-e4m3 260 $X verify --kernels $P --kv-dtype e4m3 --cases 200 --seed 6106
job sanitize 260 $X sanitize --pass fwd --kernels $P --head-dims 32 --logs $L/san
job rel-d32 260 $X reliability --kernels $P --head-dims 32 --only badinput,oob,determinism,nonfinite,modes,batchinv,streams --determinism-runs 50 --persistent-runs 50 --streams-iterations 100
python3 -m pip install -q --no-deps --target /tmp/fa3pkg .carry/fa3/*.whl > $L/pip.log 2>&1
wait
sort $L/rc.txt | tee -a $R
for f in $L/v-*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -1)" | tee -a $R; done
grep -hE "FAIL|panicked" $L/v-*.log | cut -c1-400 | head -12 | tee -a $R
grep -hE "^\| [a-z]+ \| " $L/rel-d32.log | cut -c1-160 | tee -a $R
grep -hE "FAIL|reliability:|panicked" $L/rel-d32.log | cut -c1-400 | head -8 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
echo "== checks done (${SECONDS}s)" | tee -a $R
# Prefill, fp16, peers in the same run.
timeout 120 $X bench-all --shape 4,16,2048,32 --shape 4,16,2048,64 --kernels tile64,$P --fa3-path /tmp/fa3pkg \
  --no-gemm --out-dir $L/prefill > $L/prefill.log 2>&1; echo "prefill rc=$? (${SECONDS}s)" | tee -a $R
cp $L/prefill/bench-all.md $OUT/bench-prefill.md 2>/dev/null; grep -E "^\| " $L/prefill/bench-all.md | tee -a $R
for nh in 0 1 0 1; do
  [ $SECONDS -gt 420 ] && { echo "narrow_head=$nh skipped (${SECONDS}s)" | tee -a $R; continue; }
  FLASHCORE_HOPPER_NARROW_HEAD=$nh timeout 60 $X bench-all --shape 4,16,2048,32 --shape 2,16,8192,32 --kernels $P --no-peers \
    --no-gemm --out-dir $L/narrow$nh > $L/narrow$nh.log 2>&1
  echo "narrow_head=$nh rc=$? (${SECONDS}s)" | tee -a $R; grep -E "persistent-hopper" $L/narrow$nh/bench-all.md | tee -a $R
done
dec() { # label binary
  if [ $SECONDS -gt 470 ]; then echo "== decode $1 skipped (${SECONDS}s)" | tee -a $R; return; fi
  timeout 75 $2 bench-all --suite decode --kernels $P --case sq1-sk32768 --case sq1-sk8192 --case sq1-sk4096 \
    --case sq1-sk2048 --case sq4-sk8192 --no-peers --no-gemm --repeats 5 --kv-dtype e4m3 --out-dir $L/dec-$1 > $L/dec-$1.log 2>&1
  echo "== decode $1 rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "persistent-hopper \| graph" $L/dec-$1/bench-decode.md 2>/dev/null | cut -d'|' -f2,5 | tee -a $R
}
dec base $B; dec new $X; dec base2 $B; dec new2 $X
(cd /tmp && tar cJf $OUT/logs-call1.tar.xz logs-call1)
echo "(${SECONDS}s)" | tee -a $R
