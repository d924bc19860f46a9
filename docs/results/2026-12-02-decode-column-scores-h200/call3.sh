#!/bin/bash
# Decode at D = 512, third call: the suite's rows calls 1-2 did not reach (MHA, speculative
# decoding, chunked prefill), main (.carry/xtask-base, ffa3324) and the final build (.carry/xtask)
# interleaved, contiguous and paged (block 64) caches, with the read probes of the same run.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
N=.carry/xtask; B=.carry/xtask-base; R=$OUT/summary.txt; L=/tmp/logs; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name binary
  local name=$1 x=$2 cases=()
  for r in hkv32-sq1-sk8192 hkv8-sq4-sk8192 hkv8-sq128-sk8192; do
    cases+=(--case "$r-d512/contig" --case "$r-d512/paged")
  done
  timeout 200 $x bench-all --suite decode --kernels persistent-hopper "${cases[@]}" --no-peers --no-gemm \
    --repeats 5 --check-rows 32 --decode-head-dim 512 --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper: .* us" $L/$name.log >> $R
  grep -E "^\| [0-9]+ \| bulk" $L/$name/bench-decode.md | cut -d'|' -f2-5 | sed 's/^/  probe/' >> $R
}
bench rows-base $B
bench rows-new $N
echo "done (${SECONDS}s)" >> $R
tar cJf $OUT/logs.tar.xz -C /tmp logs 2>/dev/null
cat $R
