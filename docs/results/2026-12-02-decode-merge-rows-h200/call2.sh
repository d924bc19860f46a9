#!/bin/bash
# Decode merge at D <= 256, second call: main (.carry/xtask-base, .carry/flashcore-base, 18e57aa)
# against the warp-a-row merge (.carry/xtask, .carry/flashcore).
# 1. Bit-identity of the two builds' O and LSE on the forced decode kernel (bitid.sh).
# 2. GPU alone: the two rows short of 90 % at 256 (one sequence of 32768; speculative, Sq = 4),
#    main and new interleaved, two rounds, contiguous and paged 64; the new build's timeline on
#    both (FLASHCORE_DECODE_TRACE=1, timeline.py); then the decode suite's contiguous and paged
#    rows at 256 (new), and at 128 and 64 (main, new).
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
N=.carry/xtask; B=.carry/xtask-base; R=$OUT/summary.txt; L=/tmp/logs; rm -rf $L; mkdir -p $L/bitid
H=docs/results/2026-12-02-decode-merge-rows-h200
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
python3 $H/bitid_inputs.py $L/bitid && timeout 150 bash $H/bitid.sh .carry/flashcore-base .carry/flashcore $L/bitid > $L/bitid.log 2>&1
echo "== bitid rc=$? (${SECONDS}s): $(tail -1 $L/bitid.log)" >> $R
grep -E "DIFFERS|rc=[1-9]" $L/bitid.log | head -5 >> $R
rm -f $L/bitid/*.npy
bench() {  # name binary head_dim case-filter... (env before the name)
  local name=$1 x=$2 d=$3; shift 3
  local cases=(); for c in "$@"; do cases+=(--case "$c"); done
  timeout 170 $x bench-all --suite decode --kernels persistent-hopper "${cases[@]}" --no-peers --no-gemm \
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
FLASHCORE_DECODE_TRACE=1 bench trace-long-256 $N 256 sq1-sk32768-d256/contig
FLASHCORE_DECODE_TRACE=1 bench trace-spec-256 $N 256 sq4-sk8192-d256/contig
python3 $H/timeline.py $L/trace-long-256.log $L/trace-spec-256.log > $L/timeline-256.txt 2>&1
bench suite256-new $N 256 /contig /paged-64
for d in 128 64; do
  bench suite$d-base $B $d /contig /paged-64
  bench suite$d-new $N $d /contig /paged-64
done
echo "done (${SECONDS}s)" >> $R
python3 $H/probe_table.py $L/*.log > $L/probe-tables.md 2>&1
tar cJf $OUT/logs.tar.xz -C /tmp logs 2>/dev/null
cat $R
