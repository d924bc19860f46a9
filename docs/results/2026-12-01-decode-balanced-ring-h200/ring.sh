#!/bin/bash
# Balanced splits in one ring (FLASHCORE_DECODE_BALANCE=N: each CTA a fixed run from the first
# three quarters of its unit's key tiles, then tail chunks of N tiles from a counter, all in one
# cp.async ring; a partial a piece, written from registers) against the default plan, one binary
# (.carry/xtask-bal), on the one-sequence long row at D = 512 and 256; D = 256 also with its
# warps taking all keys of a tile (FLASHCORE_DECODE_COLUMN_WARPS=4, which balance needs) alone.
# Then verify with balance forced (split-count sweep, one-tile chunks) and determinism.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask-bal; R=$OUT/summary.txt; L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name head_dim env...
  local name=$1 d=$2; shift 2
  if [ $SECONDS -gt 200 ]; then echo "== $name skipped (${SECONDS}s)" >> $R; return; fi
  env "$@" timeout 60 $X bench-all --suite decode --kernels persistent-hopper --case sk32768-d$d/contig \
    --case sk32768-d$d/paged --no-peers --no-gemm --repeats 5 --decode-head-dim $d --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name (D=$d $*) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| graph|probe" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,5,6 | sed 's/b1-hq32-hkv8-sq1-//' >> $R
}
bench d512-off 512 A=0
bench d512-b8 512 FLASHCORE_DECODE_BALANCE=8
bench d512-b4 512 FLASHCORE_DECODE_BALANCE=4
bench d512-b16 512 FLASHCORE_DECODE_BALANCE=16
bench d256-off 256 A=0
bench d256-col4 256 FLASHCORE_DECODE_COLUMN_WARPS=4
bench d256-b8 256 FLASHCORE_DECODE_BALANCE=8
bench d256-b4 256 FLASHCORE_DECODE_BALANCE=4
bench d256-b16 256 FLASHCORE_DECODE_BALANCE=16
echo "== checks (${SECONDS}s)" >> $R
FLASHCORE_DECODE_BALANCE=3 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 120 $X verify --kernels persistent-hopper --head-dims 160,256,320,512 --cases 200 --seed 5401 > $L/verify-sweep.log 2>&1 &
FLASHCORE_DECODE_BALANCE=1 FLASHCORE_DECODE=force timeout 120 $X verify --kernels persistent-hopper --head-dims 192,256,448,512 --cases 150 --seed 5402 > $L/verify-b1.log 2>&1 &
FLASHCORE_DECODE_BALANCE=2 timeout 120 $X verify --kernels persistent-hopper --head-dims 256,512 --cases 150 --seed 5403 > $L/verify-b2.log 2>&1 &
FLASHCORE_DECODE_COLUMN_WARPS=4 FLASHCORE_DECODE=force timeout 120 $X verify --kernels persistent-hopper --head-dims 136,256 --cases 100 --seed 5404 > $L/verify-col4.log 2>&1 &
FLASHCORE_DECODE_BALANCE=4 timeout 120 $X reliability --kernels persistent-hopper --only determinism --determinism-runs 50 > $L/determinism.log 2>&1 &
wait
for f in verify-sweep verify-b1 verify-b2 verify-col4; do echo "$f: $(grep -E '^verify:|passed|failed' $L/$f.log | tail -2 | tr '\n' ' ')" >> $R; done
echo "determinism: $(grep -iE 'pass|fail' $L/determinism.log | tail -3 | tr '\n' ' ')" >> $R
for f in $L/*.log; do xz -9 $f; done
echo "done (${SECONDS}s)" >> $R
cat $R
