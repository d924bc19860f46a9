#!/bin/bash
# A/B of interleaved decode splits (FLASHCORE_DECODE_INTERLEAVE=1: split s of n takes key tiles
# s, s+n, ...) against runs of consecutive tiles (0), one binary (.carry/xtask-il), alternated:
# the long row (1,32,8,1,32768) at D = 512, 256, 128 twice each, the decode suite at D = 256
# and 128 once each; then verify with interleaving forced on (split-count sweep, e4m3).
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask-il; R=$OUT/summary.txt; L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name head_dim case interleave [VAR=value ...]
  local name=$1 d=$2 c=$3 il=$4; shift 4
  if [ $SECONDS -gt 380 ]; then echo "== $name skipped (${SECONDS}s)" >> $R; return; fi
  env FLASHCORE_DECODE_INTERLEAVE=$il "$@" timeout 120 $X bench-all --suite decode --kernels persistent-hopper $c --no-peers \
    --no-gemm --repeats 7 --decode-head-dim $d --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name (D=$d il=$il $*) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| graph" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,5 | sed 's/-sq1-/ /' >> $R
}
for rep in 1 2; do
  for d in 512 256 128; do
    for il in 0 1; do bench long-d$d-il$il-r$rep $d "--case sk32768" $il; done
  done
done
for d in 256 128; do for il in 1 0; do bench suite-d$d-il$il $d "" $il; done; done
echo "== verify (${SECONDS}s)" >> $R
FLASHCORE_DECODE_INTERLEAVE=1 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 150 $X verify --kernels persistent-hopper --cases 300 --seed 5101 > $L/verify-sweep.log 2>&1 &
FLASHCORE_DECODE_INTERLEAVE=1 timeout 150 $X verify --kernels persistent-hopper --kv-dtype e4m3 --cases 200 --seed 5102 > $L/verify-e4m3.log 2>&1 &
wait
for f in verify-sweep verify-e4m3; do echo "$f: $(grep -E 'passed|failed' $L/$f.log | tail -2 | tr '\n' ' ')" >> $R; done
echo "done (${SECONDS}s)" >> $R
cat $R
