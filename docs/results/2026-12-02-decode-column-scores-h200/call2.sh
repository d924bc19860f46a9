#!/bin/bash
# Decode at D = 512, second call: main (.carry/xtask-base, ffa3324), call 1's build (S from the
# warps' quarters of the head dim, .carry/xtask-scores) and the final build (that, and the column
# warps' partials stored from registers without the shared-memory merge, .carry/xtask).
# 1. GPU alone: the one-sequence row (1,32,8,1,32768) twice per build, interleaved; then the
#    whole decode suite at 512 and at 256 on the final build (256's kernels are main's).
# 2. The final build's checks, side by side: verify with the decode kernel forced at head dims
#    264-512 and a split count drawn per case (1000 cases), both paths' default plans at 264-512,
#    the batch-invariant mode, determinism and batchinv at 512, and compute-sanitizer at 512.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
N=.carry/xtask; S=.carry/xtask-scores; B=.carry/xtask-base; R=$OUT/summary.txt; L=/tmp/logs; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name binary head_dim case-or-all
  local name=$1 x=$2 d=$3 c=$4 cases=()
  [ "$c" != all ] && cases=(--case "$c")
  timeout 150 $x bench-all --suite decode --kernels persistent-hopper "${cases[@]}" --no-peers --no-gemm \
    --repeats 5 --check-rows 32 --decode-head-dim $d --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name rc=$? (${SECONDS}s)" >> $R
  grep -E "\| persistent-hopper \| (contiguous|paged 64) \|" $L/$name/bench-decode.md | cut -d'|' -f2,5,6 >> $R
  grep -E "^\| [0-9]+ \| bulk" $L/$name/bench-decode.md | cut -d'|' -f2-5 | sed 's/^/  probe/' >> $R
}
for round in 1 2; do
  bench long-base-$round $B 512 sk32768
  bench long-scores-$round $S 512 sk32768
  bench long-new-$round $N 512 sk32768
done
bench suite512-new $N 512 all
bench suite256-new $N 256 all
echo "== checks from ${SECONDS}s" >> $R
LEFT=$((575 - SECONDS)); [ $LEFT -gt 300 ] && LEFT=300
job() { local name=$1; shift; timeout $LEFT "$@" > $L/$name.log 2>&1; echo "$name rc=$?" >> $L/rc.txt; }
FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep job verify-forced $N verify --kernels persistent-hopper \
  --head-dims 264,320,384,448,504,512 --cases 1000 --seed 51411 &
job verify-hopper $N verify --kernels persistent-hopper --head-dims 264,384,512 --cases 400 --seed 51412 &
job verify-portable $N verify --kernels persistent-portable --head-dims 272,448,512 --cases 300 --seed 51413 &
job verify-bi $N verify --kernels persistent-hopper --head-dims 320,512 --batch-invariant --cases 200 --seed 51414 &
job reliability $N reliability --kernels persistent-hopper --only determinism,batchinv --head-dims 512 --determinism-runs 100 &
job sanitize $N sanitize --kernels persistent-hopper --pass fwd --tools memcheck,racecheck,synccheck,initcheck --head-dims 512 --logs $L/sanitize &
wait
cat $L/rc.txt >> $R
for f in verify-forced verify-hopper verify-portable verify-bi; do
  echo "$f: $(grep -E 'passed, .* failed' $L/$f.log | tail -1)" >> $R
  grep -E "cases, [0-9]+ failed" $L/$f.log | tail -1 >> $R
done
grep -hE "FAIL|panicked" $L/verify-*.log | cut -c1-300 | head -8 >> $R
echo "reliability: $(grep -iE 'passed|failed' $L/reliability.log | tail -3 | tr '\n' ' ')" >> $R
echo "sanitize: $(grep -E 'sanitize:' $L/sanitize.log | tail -2 | tr '\n' ' ')" >> $R
grep -E "errors \(" $L/sanitize.log | head -8 >> $R
echo "done (${SECONDS}s)" >> $R
tar cJf $OUT/logs.tar.xz -C /tmp logs 2>/dev/null
cat $R
