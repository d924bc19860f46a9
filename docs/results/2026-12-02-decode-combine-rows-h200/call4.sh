#!/bin/bash
# Decode combine a warp a row where the splits are few, fourth call: the one-sequence row at 256
# (many splits: one slice a combine warp, as before), bf16 and e4m3 caches, main (.carry/xtask-base,
# da1dc32) and the change (.carry/xtask) interleaved, three rounds, the GPU alone.
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
for round in 1 2 3; do
  bench long-base-$round $B 256 sq1-sk32768-d256/contig
  bench long-new-$round $N 256 sq1-sk32768-d256/contig
  bench long-e4m3-base-$round $B 256 sq1-sk32768-d256/e4m3
  bench long-e4m3-new-$round $N 256 sq1-sk32768-d256/e4m3
done
echo "done (${SECONDS}s)" >> $R
python3 $H/probe_table.py $L/*.log > $L/probe-tables.md 2>&1
tar cJf $OUT/logs.tar.xz -C /tmp logs 2>/dev/null
cat $R
