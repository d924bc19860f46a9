#!/bin/bash
# Decode combine, fifth call: the wide combine as an entry of its own (.carry/xtask-two,
# .carry/flashcore-two: attention_decode_combine keeps main's code, attention_decode_combine_rows
# takes a row a warp) against main (.carry/xtask-base, da1dc32), the GPU alone: the one-sequence
# row at 256 on an e4m3 cache and the speculative row at 256, interleaved; then, while the call
# has time, bitid.sh against main.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
T=.carry/xtask-two; B=.carry/xtask-base; R=$OUT/summary.txt; L=/tmp/logs; rm -rf $L; mkdir -p $L/bitid
H=docs/results/2026-12-02-decode-combine-rows-h200
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name binary head_dim case-filter... (--kv-dtype e4m3 where a filter names e4m3 rows)
  local name=$1 x=$2 d=$3 c; shift 3
  local cases=() kv=(); for c in "$@"; do cases+=(--case "$c"); done
  [[ "$*" == *e4m3* ]] && kv=(--kv-dtype e4m3)
  timeout 60 $x bench-all --suite decode --kernels persistent-hopper "${cases[@]}" "${kv[@]}" --no-peers --no-gemm \
    --repeats 5 --check-rows 32 --decode-head-dim $d --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name rc=$? (${SECONDS}s)" >> $R
  grep -E "\| persistent-hopper \| (contiguous|paged 64|e4m3[^|]*) \|" $L/$name/bench-decode.md | cut -d'|' -f2,5,6 >> $R
  grep -E "^\| 256 \| bulk" $L/$name/bench-decode.md | head -1 | cut -d'|' -f2-5 | sed 's/^/  probe/' >> $R
}
bench e4m3-long-base $B 256 sq1-sk32768-d256/e4m3
bench e4m3-long-two $T 256 sq1-sk32768-d256/e4m3
bench spec-base $B 256 sq4-sk8192-d256/contig sq4-sk8192-d256/paged-64
bench spec-two $T 256 sq4-sk8192-d256/contig sq4-sk8192-d256/paged-64
(python3 $H/bitid_inputs.py $L/bitid && timeout 70 bash $H/bitid.sh .carry/flashcore-base .carry/flashcore-two $L/bitid > $L/bitid.log 2>&1)
echo "== bitid rc=$? (${SECONDS}s): $(tail -1 $L/bitid.log)" >> $R
grep -E "DIFFERS" $L/bitid.log | head -5 >> $R
rm -f $L/bitid/*.npy
echo "done (${SECONDS}s)" >> $R
tar cJf $OUT/logs.tar.xz -C /tmp logs 2>/dev/null
cat $R
