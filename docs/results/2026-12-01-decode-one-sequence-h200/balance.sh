#!/bin/bash
# Balanced decode splits (FLASHCORE_DECODE_BALANCE=N: a fixed run from the first three quarters a
# CTA, then tail chunks of N key tiles taken from a counter) against the default plan, one binary
# (.carry/xtask-bal), on the long row at D = 512, 256 and 128; then verify with balance forced
# (split-count sweep, chunks of 1 tile, e4m3) and decode determinism with it.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask-bal; R=$OUT/summary.txt; L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name head_dim balance
  local name=$1 d=$2 b=$3
  if [ $SECONDS -gt 150 ]; then echo "== $name skipped (${SECONDS}s)" >> $R; return; fi
  env ${b:+FLASHCORE_DECODE_BALANCE=$b} timeout 50 $X bench-all --suite decode --kernels persistent-hopper --case sk32768-d$d/contig \
    --case sk32768-d$d/paged --no-peers --no-gemm --repeats 5 --decode-head-dim $d --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name (D=$d balance=${b:-off}) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| graph" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,5 | sed 's/b1-hq32-hkv8-sq1-//' >> $R
}
for d in 256 512; do for b in "" 4 8; do bench d$d-b${b:-off} $d "$b"; done; done
bench d128-boff 128 ""; bench d128-b4 128 4
echo "== checks (${SECONDS}s)" >> $R
FLASHCORE_DECODE_BALANCE=3 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 100 $X verify --kernels persistent-hopper --cases 200 --seed 5301 > $L/verify-sweep.log 2>&1 &
FLASHCORE_DECODE_BALANCE=1 FLASHCORE_DECODE=force timeout 100 $X verify --kernels persistent-hopper --cases 150 --seed 5302 > $L/verify-b1.log 2>&1 &
FLASHCORE_DECODE_BALANCE=2 timeout 100 $X verify --kernels persistent-hopper --kv-dtype e4m3 --cases 120 --seed 5303 > $L/verify-e4m3.log 2>&1 &
FLASHCORE_DECODE_BALANCE=4 timeout 100 $X reliability --kernels persistent-hopper --only determinism --determinism-runs 50 > $L/determinism.log 2>&1 &
wait
for f in verify-sweep verify-b1 verify-e4m3; do echo "$f: $(grep -E '^verify:|cases, [0-9]+ failed' $L/$f.log | tail -1)" >> $R; done
echo "determinism: $(grep -iE 'pass|fail' $L/determinism.log | tail -3 | tr '\n' ' ')" >> $R
for f in $L/*.log; do xz -9 $f; done
echo "done (${SECONDS}s)" >> $R
cat $R
