#!/bin/bash
# A/B of the decode kernel on nvidia-h200: the tree's build (.carry/xtask: the combine with a
# warp per 64-column row slice and 32 splits a round trip, the swizzled epilogue merge) against
# the commit before it (.carry/xtask-base), alternating base/new twice on the rows a split plan
# takes (the long row, (8,32,8,1,8192) and speculative decoding; bf16 and e4m3 caches), then the
# e4m3 ring at 4 slots and the long row at 32 splits on the new build, then the long and
# speculative rows at head dims 256 and 512, base and new.
# Run from the repository root. Writes under $OUT: ab.txt, logs-ab.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
R=$OUT/ab.txt; L=/tmp/logs-ab; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name binary head_dim "cases" [VAR=value ...]
  local name=$1 x=$2 d=$3 cases=$4; shift 4
  if [ $SECONDS -gt 540 ]; then echo "== $name skipped (${SECONDS}s)" >> $R; return; fi
  local args=(); for c in $cases; do args+=(--case $c); done
  env "$@" timeout 100 $x bench-all --suite decode --kernels persistent-hopper "${args[@]}" --no-peers \
    --no-gemm --repeats 9 --decode-head-dim $d --kv-dtype e4m3 --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name (D=$d $*) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| graph" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,5 | sed -E 's/-hq32-hkv8//; s/-d(128|256|512)//' >> $R
}
C128="b8-hq32-hkv8-sq1-sk8192 sq4-sk8192 sk32768"
for round in 1 2; do
  bench base-$round .carry/xtask-base 128 "$C128"
  bench new-$round .carry/xtask 128 "$C128"
done
bench new-st4 .carry/xtask 128 "$C128" FLASHCORE_DECODE_STAGES=4
bench new-s32 .carry/xtask 128 "sk32768" FLASHCORE_DECODE_SPLITS=32
for d in 256 512; do
  bench base-$d .carry/xtask-base $d "sq4-sk8192 sk32768"
  bench new-$d .carry/xtask $d "sq4-sk8192 sk32768"
done
(cd /tmp && tar cJf $OUT/logs-ab.tar.xz logs-ab)
cat $R
