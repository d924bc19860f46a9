#!/bin/bash
# e4m3 ring depths at D = 64 and 256 on every Sq = 1 row and the speculative row of the decode
# suite (contiguous and paged block 64), on nvidia-h200, alone on the GPU: the plan's rings
# (8 slots at 64, 6 at 256) against FLASHCORE_DECODE_STAGES=4 and, at 256, 3 (two CTAs an SM fit
# only with 3). Run from the repository root with a stripped release xtask in .carry/xtask.
# Writes under $OUT: rings.txt, logs-rings.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/rings.txt; L=/tmp/logs-rings; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name head_dim [VAR=value ...]
  local name=$1 d=$2; shift 2
  if [ $SECONDS -gt 420 ]; then echo "== $name skipped (${SECONDS}s)" >> $R; return; fi
  local args=(); for c in sq1-sk32768 sq1-sk8192 sq1-sk4096 sq1-sk2048 sq4-sk8192; do args+=(--case $c-d$d/e4m3); done
  env "$@" timeout 110 $X bench-all --suite decode --kernels persistent-hopper "${args[@]}" --no-peers \
    --no-gemm --repeats 5 --decode-head-dim $d --kv-dtype e4m3 --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name (D=$d $*) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| graph" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,5 | sed -E 's/-hq32//; s/-d(64|128|256)//' >> $R
}
bench d64 64
bench d64-st4 64 FLASHCORE_DECODE_STAGES=4
bench d256 256
bench d256-st4 256 FLASHCORE_DECODE_STAGES=4
bench d256-st3 256 FLASHCORE_DECODE_STAGES=3
(cd /tmp && tar cJf $OUT/logs-rings.tar.xz logs-rings)
echo "(${SECONDS}s)" >> $R
cat $R
