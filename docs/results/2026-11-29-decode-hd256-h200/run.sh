#!/usr/bin/env bash
# The split-KV decode kernel at head dim 256 (Gemma's) on the H200: verify with every problem the
# decode kernel can take routed to it (FLASHCORE_DECODE=force; head dims drawn from the whole set,
# so 64, 128 and 256 take it and the rest the Hopper path), the same batch-invariant, reliability
# and sanitize at 256, then the decode suite at D = 256 beside the peers, a device-to-device copy
# and the read probe, in one call.
# From the repo root, with a stripped release xtask of the tree in .carry/xtask:
#   bash docs/results/2026-11-29-decode-hd256-h200/run.sh
# Outputs in $OUT: decode256.txt (the summary), bench-decode-256.md, logs-decode256.tar.xz.
# (The run committed here copied bench-all.md, which the decode suite does not write: its
# bench-decode.md was taken from the logs.)
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/decode256.txt; L=/tmp/logs-decode256; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
P=persistent-hopper
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify 300 env FLASHCORE_DECODE=force $X verify --kernels $P --cases 600 --seed 3201
job verify-bi 300 env FLASHCORE_DECODE=force $X verify --kernels $P --batch-invariant --cases 200 --seed 3202
job sanitize 300 env FLASHCORE_DECODE=force $X sanitize --pass fwd --kernels $P --head-dims 256 --logs $L/san
job reliability 300 $X reliability --kernels $P --head-dims 256 --only badinput,oob,determinism,nonfinite,modes,batchinv,streams --determinism-runs 50 --persistent-runs 50 --streams-iterations 100
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -2 | tr '\n' ' ')" | tee -a $R; done
grep -hE "^\| [a-z]+ \| " $L/reliability.log | cut -c1-200 | tee -a $R
grep -hE "FAIL|reliability:|panicked" $L/reliability.log $L/verify*.log | cut -c1-400 | head -12 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
timeout $((580 - SECONDS)) $X bench-all --suite decode --decode-head-dim 256 --kernels $P --no-fa3 --out-dir $L/bench > $L/bench.log 2>&1; echo "bench rc=$? (${SECONDS}s)" | tee -a $R
cp $L/bench/bench-decode.md $OUT/bench-decode-256.md 2>/dev/null
grep -E "^\| " $L/bench/bench-decode.md | head -50 | tee -a $R
echo "(${SECONDS}s)" | tee -a $R
(cd /tmp && tar cJf $OUT/logs-decode256.tar.xz logs-decode256)
