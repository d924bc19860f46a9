#!/bin/bash
# Decode combine a warp a row where the splits are few, third call (call 1's main run at 512 hit
# its 120 s timeout): the GPU alone, main (.carry/xtask-base, da1dc32) then the change
# (.carry/xtask): the decode suite's contiguous and paged rows at 512; then the one-sequence and
# speculative rows at 256 on an e4m3 cache.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
N=.carry/xtask; B=.carry/xtask-base; R=$OUT/summary.txt; L=/tmp/logs; rm -rf $L; mkdir -p $L
H=docs/results/2026-12-02-decode-combine-rows-h200
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name binary head_dim case-filter... (--kv-dtype e4m3 where a filter names e4m3 rows)
  local name=$1 x=$2 d=$3 c; shift 3
  local cases=() kv=(); for c in "$@"; do cases+=(--case "$c"); done
  [[ "$*" == *e4m3* ]] && kv=(--kv-dtype e4m3)
  timeout 200 $x bench-all --suite decode --kernels persistent-hopper "${cases[@]}" "${kv[@]}" --no-peers --no-gemm \
    --repeats 5 --check-rows 32 --decode-head-dim $d --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name rc=$? (${SECONDS}s)" >> $R
  grep -E "\| persistent-hopper \| (contiguous|paged 64|e4m3[^|]*) \|" $L/$name/bench-decode.md | cut -d'|' -f2,5,6 >> $R
  grep -E "^\| [0-9]+ \| bulk" $L/$name/bench-decode.md | cut -d'|' -f2-5 | sed 's/^/  probe/' >> $R
}
bench suite512-base $B 512 /contig /paged-64
bench suite512-new $N 512 /contig /paged-64
for c in sq1-sk32768 sq4-sk8192; do
  bench e4m3-$c-base $B 256 $c-d256/e4m3
  bench e4m3-$c-new $N 256 $c-d256/e4m3
done
echo "done (${SECONDS}s)" >> $R
python3 $H/probe_table.py $L/*.log > $L/probe-tables.md 2>&1
tar cJf $OUT/logs.tar.xz -C /tmp logs 2>/dev/null
cat $R
