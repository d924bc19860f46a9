#!/bin/bash
# Decode combine a warp a row where the splits are few, first call: main (.carry/xtask-base,
# da1dc32) against the change (.carry/xtask), the GPU alone:
# 1. the two rows nearest 90 % of the probe at 256 (one sequence of 32768; speculative, Sq = 4),
#    main and new interleaved, two rounds, contiguous and paged 64;
# 2. the decode suite's contiguous and paged rows, main then new, at 256, 512, 128 and 64 (at 64 the
#    combine has one slice a row, as before; timed last, while the call has time).
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
N=.carry/xtask; B=.carry/xtask-base; R=$OUT/summary.txt; L=/tmp/logs; rm -rf $L; mkdir -p $L
H=docs/results/2026-12-02-decode-combine-rows-h200
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name binary head_dim case-filter...
  local name=$1 x=$2 d=$3 c; shift 3
  local cases=(); for c in "$@"; do cases+=(--case "$c"); done
  [ $SECONDS -gt 560 ] && { echo "== $name skipped (${SECONDS}s)" >> $R; return; }
  timeout 120 $x bench-all --suite decode --kernels persistent-hopper "${cases[@]}" --no-peers --no-gemm \
    --repeats 5 --check-rows 32 --decode-head-dim $d --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name rc=$? (${SECONDS}s)" >> $R
  grep -E "\| persistent-hopper \| (contiguous|paged 64) \|" $L/$name/bench-decode.md | cut -d'|' -f2,5,6 >> $R
  grep -E "^\| [0-9]+ \| bulk" $L/$name/bench-decode.md | cut -d'|' -f2-5 | sed 's/^/  probe/' >> $R
}
for round in 1 2; do
  for c in sq1-sk32768 sq4-sk8192; do
    bench $c-base-$round $B 256 $c-d256/contig $c-d256/paged-64
    bench $c-new-$round $N 256 $c-d256/contig $c-d256/paged-64
  done
done
for d in 256 512 128 64; do
  bench suite$d-base $B $d /contig /paged-64
  bench suite$d-new $N $d /contig /paged-64
done
echo "done (${SECONDS}s)" >> $R
python3 $H/probe_table.py $L/*.log > $L/probe-tables.md 2>&1
tar cJf $OUT/logs.tar.xz -C /tmp logs 2>/dev/null
cat $R
