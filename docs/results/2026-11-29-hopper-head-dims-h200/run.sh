#!/usr/bin/env bash
# The Hopper generation-5 path at every head dim (builds of 64, 128, 192 and 256 columns, every
# other multiple of 8 padded up) on the H200: verify (head dims drawn from the whole set, modes in
# half the cases, and batch-invariant), sanitize and reliability at 96, 192 and 256, then prefill
# beside tile64, the portable path and the peers, in one call.
# From the repo root, with a stripped release xtask of the tree in .carry/xtask and the
# flash-attn3-jax and einops wheels in .carry/:
#   bash docs/results/2026-11-29-hopper-head-dims-h200/run.sh [first|recheck]
# Outputs in $OUT: headdims.txt (the summary), bench-head-dims.md, logs-headdims.tar.xz.
# first: all of the above at 32-256 (verify timed out mid-way: a module for each padded head dim).
# recheck: after one module for every padded head dim (FC_HOPPER_PADDED_HEAD) and paged caches on
# the dense key tiles: the same checks with longer limits, then the bench of the padded head dims
# (the 192 and 256 builds' PTX is unchanged since first).
set -u
PHASE=${1:-first}
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/headdims.txt; L=/tmp/logs-headdims; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
P=persistent-hopper
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
T=330; [ $PHASE = recheck ] && T=390
job verify $T $X verify --kernels $P --cases 1000 --seed 3101
job verify-bi $T $X verify --kernels $P --batch-invariant --cases 300 --seed 3102
job sanitize $T $X sanitize --pass fwd --kernels $P --head-dims 96,192,256 --logs $L/san
(for d in 96 192 256; do
  timeout 200 $X reliability --kernels $P --head-dims $d --only badinput,oob,determinism,nonfinite,modes,batchinv,streams --determinism-runs 50 --persistent-runs 50 --streams-iterations 100 > $L/reliability-d$d.log 2>&1
  echo "reliability D=$d rc=$? (${SECONDS}s)" >> $L/rc.txt
done) &
python3 -m pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-*.whl .carry/einops-*.whl > $L/pip.log 2>&1
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -2 | tr '\n' ' ')" | tee -a $R; done
grep -hE "^\| [a-z]+ \| " $L/reliability-d*.log | cut -c1-200 | tee -a $R
grep -hE "FAIL|reliability:|panicked" $L/reliability-d*.log | cut -c1-500 | head -12 | tee -a $R
grep -hE "FAIL|panicked" $L/verify*.log | cut -c1-400 | head -12 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
DIMS="32 64 96 128 160 192 224 256"; BT=240
[ $PHASE = recheck ] && DIMS="32 96 160 224" && BT=$((570 - SECONDS))
SH=""; for d in $DIMS; do SH="$SH --shape 4,16,2048,$d"; done
timeout $BT $X bench-all $SH --kernels tile64,persistent-portable,$P --fa3-path /tmp/fa3pkg --out-dir $L/bench > $L/bench.log 2>&1; echo "bench rc=$? (${SECONDS}s)" | tee -a $R
cp $L/bench/bench-all.md $OUT/bench-head-dims.md 2>/dev/null
grep -E "^\| " $L/bench/bench-all.md | head -60 | tee -a $R
echo "(${SECONDS}s)" | tee -a $R
(cd /tmp && tar cJf $OUT/logs-headdims.tar.xz logs-headdims)
