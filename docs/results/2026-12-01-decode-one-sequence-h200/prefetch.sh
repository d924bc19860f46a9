#!/bin/bash
# The long row's fixed cost: A base; B the combine lets the next call's split kernel launch before
# it waits (FLASHCORE_DECODE_COMBINE_EARLY=1), so that call's CTAs prefetch during this call's
# tail; C = B with 4 tiles prefetched (FLASHCORE_DECODE_PREFETCH_TILES=4); D 4 tiles alone.
# One binary (.carry/xtask-pf); then verify with C forced on.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask-pf; R=$OUT/summary.txt; L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
cfg() { case $1 in A) ;; B) echo FLASHCORE_DECODE_COMBINE_EARLY=1;; C) echo FLASHCORE_DECODE_COMBINE_EARLY=1 FLASHCORE_DECODE_PREFETCH_TILES=4;; D) echo FLASHCORE_DECODE_PREFETCH_TILES=4;; esac; }
bench() {  # name head_dim config cases...
  local name=$1 d=$2 c=$3; shift 3
  if [ $SECONDS -gt 330 ]; then echo "== $name skipped (${SECONDS}s)" >> $R; return; fi
  env FLASHCORE_X=1 $(cfg $c) timeout 60 $X bench-all --suite decode --kernels persistent-hopper "$@" --no-peers \
    --no-gemm --repeats 5 --decode-head-dim $d --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name (D=$d $c: $(cfg $c)) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| graph" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,5 | sed 's/-sq1-/ /' >> $R
}
i=0; for c in A B C D A C; do i=$((i+1)); bench d512-$i$c 512 $c --case sk32768; done
i=0; for c in A B C D; do i=$((i+1)); bench d256-$i$c 256 $c --case sk32768; done
i=0; for c in A C; do i=$((i+1)); bench d128-$i$c 128 $c --case sk32768 --case b8-hq32-hkv8-sq1-sk8192; done
echo "== verify C (${SECONDS}s)" >> $R
FLASHCORE_DECODE_COMBINE_EARLY=1 FLASHCORE_DECODE_PREFETCH_TILES=4 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 100 $X verify --kernels persistent-hopper --cases 150 --seed 5201 > $L/verify.log 2>&1
echo "verify rc=$?: $(grep -E 'verify:' $L/verify.log | tail -1)" >> $R
tar cJf $OUT/logs.tar.xz -C /tmp logs 2>/dev/null
echo "done (${SECONDS}s)" >> $R
cat $R
