#!/usr/bin/env bash
# Q·K of the e4m3 decode split kernel in four mma chains instead of two (even and odd k steps
# into accumulators of their own, summed at the end; .carry/xtask-qk) against d2087be
# (.carry/xtask), nvcc's ptxas: 254 registers, no spills at D = 64/128/256. On nvidia-h200, one
# call: verify of the decode kernel on e4m3 caches with the change, then the D = 128 e4m3 Sq = 1
# rows, base and new interleaved twice, alone on the GPU.
# Output in $OUT: call5.txt, logs-call5.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
B=.carry/xtask; N=.carry/xtask-qk; R=$OUT/call5.txt; L=/tmp/logs-call5; rm -rf $L; mkdir -p $L
SECONDS=0
timeout 100 $N verify --kernels persistent-hopper --kv-dtype e4m3 --cases 150 --seed 6201 > $L/verify.log 2>&1
echo "verify rc=$? (${SECONDS}s): $(grep -E 'passed, .* failed' $L/verify.log | tail -1)" | tee $R
grep -hE "FAIL|panicked" $L/verify.log | cut -c1-300 | head -5 | tee -a $R
ab() { # label binary
  [ $SECONDS -gt 200 ] && { echo "$1 skipped" | tee -a $R; return; }
  timeout 40 $2 bench-all --suite decode --kernels persistent-hopper --case sq1-sk32768-d128/e4m3 --case sq1-sk8192-d128/e4m3 \
    --case sq1-sk4096-d128/e4m3 --no-peers --no-gemm --repeats 5 --kv-dtype e4m3 --out-dir $L/$1 > $L/$1.log 2>&1
  echo "== $1 rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "persistent-hopper: .* us" $L/$1.log | sed -E 's/ persistent-hopper: ([0-9.]+) us.*/ \1/' | tee -a $R
}
ab base $B; ab new $N; ab base2 $B; ab new2 $N
(cd /tmp && tar cJf $OUT/logs-call5.tar.xz logs-call5)
echo "(${SECONDS}s)" | tee -a $R
