#!/bin/bash
# The decode kernel's O rescale skipped where no row of a warp's tile has a new max (bit-identical:
# every alpha is then exactly 1), against the commit before it; and the e4m3 ring depths at
# D = 64 and 256, on nvidia-h200, in one call, alone on the GPU:
# 1. base (.carry/xtask-base) then new (.carry/xtask) on every D = 128 decode row, contiguous and
#    paged (block 64), bf16 and e4m3 caches; the same at D = 256 on bf16 contiguous caches;
# 2. new, e4m3 rows only, at D = 64 and 256 under the plan's ring and FLASHCORE_DECODE_STAGES
#    4 and 3.
# Run from the repository root. Writes under $OUT: ab.txt, logs-ab.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
R=$OUT/ab.txt; L=/tmp/logs-ab; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name binary head_dim "case filters" [VAR=value ...]
  local name=$1 x=$2 d=$3 cases=$4; shift 4
  if [ $SECONDS -gt 540 ]; then echo "== $name skipped (${SECONDS}s)" >> $R; return; fi
  local args=(); for c in $cases; do args+=(--case $c); done
  env "$@" timeout 150 $x bench-all --suite decode --kernels persistent-hopper "${args[@]}" --no-peers \
    --no-gemm --repeats 7 --decode-head-dim $d --kv-dtype e4m3 --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name (D=$d $*) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| graph" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,5 | sed -E 's/-hq32//; s/-d(64|128|256)//' >> $R
}
ALL="/contig paged-64 e4m3-contig"
bench base-128 .carry/xtask-base 128 "$ALL"
bench new-128 .carry/xtask 128 "$ALL"
bench base-256 .carry/xtask-base 256 "/contig"
bench new-256 .carry/xtask 256 "/contig"
bench new-256-e4m3 .carry/xtask 256 "e4m3"
bench new-256-e4m3-st4 .carry/xtask 256 "e4m3" FLASHCORE_DECODE_STAGES=4
bench new-256-e4m3-st3 .carry/xtask 256 "e4m3" FLASHCORE_DECODE_STAGES=3
bench new-64-e4m3 .carry/xtask 64 "e4m3"
bench new-64-e4m3-st4 .carry/xtask 64 "e4m3" FLASHCORE_DECODE_STAGES=4
(cd /tmp && tar cJf $OUT/logs-ab.tar.xz logs-ab)
echo "(${SECONDS}s)" >> $R
cat $R
