#!/bin/bash
# Split CTAs of 8 warps (FLASHCORE_DECODE_WARPS=8: two a scheduler, the second four taking the
# other half of O's columns) against 4, interleaved twice, on the one-sequence long row at D = 512
# and 256 (contiguous and paged 64) and the decode suite's other D = 256 rows; then verify with 8
# warps at the head dims of the 256 and 512 builds.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask-w; R=$OUT/summary.txt; L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name head_dim case-filter env...
  local name=$1 d=$2 c=$3; shift 3
  if [ $SECONDS -gt 260 ]; then echo "== $name skipped (${SECONDS}s)" >> $R; return; fi
  env "$@" timeout 90 $X bench-all --suite decode --kernels persistent-hopper $c --no-peers --no-gemm --repeats 5 \
    --decode-head-dim $d --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name (D=$d $*) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| graph" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,5,6 | sed 's/-hq32-hkv8//' >> $R
  grep -A4 "Read probes" $L/$name/bench-decode.md | tail -2 | cut -d'|' -f1-3 >> $R
}
LONG512="--case sk32768-d512/contig --case sk32768-d512/paged"
LONG256="--case sk32768-d256/contig --case sk32768-d256/paged"
for round in 1 2; do
  bench d512-w4-$round 512 "$LONG512" A=0
  bench d512-w8-$round 512 "$LONG512" FLASHCORE_DECODE_WARPS=8
  bench d256-w4-$round 256 "$LONG256" A=0
  bench d256-w8-$round 256 "$LONG256" FLASHCORE_DECODE_WARPS=8
done
bench d256-all-w4 256 "" A=0
bench d256-all-w8 256 "" FLASHCORE_DECODE_WARPS=8
echo "== checks (${SECONDS}s)" >> $R
FLASHCORE_DECODE_WARPS=8 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 110 $X verify --kernels persistent-hopper --head-dims 160,256,320,512 --cases 200 --seed 5501 > $L/verify-sweep.log 2>&1 &
FLASHCORE_DECODE_WARPS=8 FLASHCORE_DECODE=force timeout 110 $X verify --kernels persistent-hopper --head-dims 192,256,448,512 --cases 150 --seed 5502 > $L/verify-force.log 2>&1 &
FLASHCORE_DECODE_WARPS=8 timeout 110 $X verify --kernels persistent-hopper --head-dims 256,512 --cases 150 --seed 5503 > $L/verify-plan.log 2>&1 &
wait
for f in verify-sweep verify-force verify-plan; do echo "$f: $(grep -E '^verify:|cases, [0-9]+ failed' $L/$f.log | tail -1)" >> $R; done
tar -C $OUT -cJf $OUT/logs.tar.xz logs && rm -rf $L
echo "done (${SECONDS}s)" >> $R
cat $R
