#!/bin/bash
# Decode at D = 512: S from the warps' quarters of the head dim (kernels/gen5_decode/scores.cuh,
# .carry/xtask) against main's every-warp-computes-all-of-S (.carry/xtask-base, ffa3324), one call.
# 1. GPU alone: the one-sequence row (1,32,8,1,32768) twice per build, interleaved, then the whole
#    decode suite once per build; each with its read probes.
# 2. Checks of the new build, side by side: verify with the decode kernel forced at head dims
#    264-512 and a split count drawn per case, verify of both paths' default plans at 264-512,
#    the batch-invariant mode, determinism and batchinv at 512, and compute-sanitizer.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
N=.carry/xtask; B=.carry/xtask-base; R=$OUT/summary.txt; L=/tmp/logs; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name binary case-or-all
  local name=$1 x=$2 c=$3 cases=()
  [ "$c" != all ] && cases=(--case "$c")
  timeout 170 $x bench-all --suite decode --kernels persistent-hopper "${cases[@]}" --no-peers --no-gemm \
    --repeats 5 --decode-head-dim 512 --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name rc=$? (${SECONDS}s)" >> $R
  grep -E "\| persistent-hopper \| (contiguous|paged 64) \|" $L/$name/bench-decode.md | cut -d'|' -f2,5,6 >> $R
  grep -E "^\| [0-9]+ \| bulk" $L/$name/bench-decode.md | cut -d'|' -f2-5 | sed 's/^/  probe/' >> $R
}
bench long-base-1 $B sk32768
bench long-new-1 $N sk32768
bench long-base-2 $B sk32768
bench long-new-2 $N sk32768
[ $SECONDS -lt 150 ] && bench suite-new $N all
[ $SECONDS -lt 260 ] && bench suite-base $B all
echo "== checks from ${SECONDS}s" >> $R
LEFT=$((570 - SECONDS)); [ $LEFT -gt 280 ] && LEFT=280
job() { local name=$1; shift; timeout $LEFT "$@" > $L/$name.log 2>&1; echo "$name rc=$?" >> $L/rc.txt; }
FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep job verify-forced $N verify --kernels persistent-hopper \
  --head-dims 264,320,384,448,504,512 --cases 1000 --seed 51401 &
job verify-hopper $N verify --kernels persistent-hopper --head-dims 264,384,512 --cases 400 --seed 51402 &
job verify-portable $N verify --kernels persistent-portable --head-dims 272,448,512 --cases 300 --seed 51403 &
job verify-bi $N verify --kernels persistent-hopper --head-dims 320,512 --batch-invariant --cases 200 --seed 51404 &
job reliability $N reliability --kernels persistent-hopper --only determinism,batchinv --head-dims 512 --determinism-runs 100 &
job sanitize $N sanitize --kernels persistent-hopper --pass fwd --tools memcheck,racecheck,synccheck --head-dims 512 --logs $L/sanitize &
wait
cat $L/rc.txt >> $R
for f in verify-forced verify-hopper verify-portable verify-bi; do
  echo "$f: $(grep -E 'passed, .* failed|cases, [0-9]+ failed' $L/$f.log | tail -2 | tr '\n' ' ')" >> $R
  grep -E "decode|: [0-9]+/" $L/$f.log | tail -3 >> $R
done
grep -hE "FAIL|panicked" $L/verify-*.log | cut -c1-300 | head -8 >> $R
echo "reliability: $(grep -iE 'passed|failed' $L/reliability.log | tail -3 | tr '\n' ' ')" >> $R
echo "sanitize: $(grep -iE 'error|passed|failed|clean' $L/sanitize.log | tail -6 | tr '\n' ' ')" >> $R
echo "done (${SECONDS}s)" >> $R
tar cJf $OUT/logs.tar.xz -C /tmp logs 2>/dev/null
cat $R
