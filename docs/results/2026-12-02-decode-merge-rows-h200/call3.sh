#!/bin/bash
# Decode merge at D <= 256, third call: the final build (.carry/xtask: the warp-a-row merge at
# D = 128 and 256, D = 64's PTX main's). GPU alone: the two 256 rows short of 90 % on main and
# final, interleaved, two rounds (call 2's interleaved runs were lost to a script error), and the
# same rows on an e4m3 cache; then the final build's checks side by side: verify with the decode kernel forced and a split count
# drawn per case (64, 128, 256; 16-bit and e4m3 caches; Hopper and portable paths), the default
# plans at 96, 192 and 256, determinism at 256, and compute-sanitizer at 256.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
N=.carry/xtask; B=.carry/xtask-base; R=$OUT/summary.txt; L=/tmp/logs; rm -rf $L; mkdir -p $L
H=docs/results/2026-12-02-decode-merge-rows-h200
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name binary head_dim case-filter... (--kv-dtype e4m3 where a filter names e4m3 rows)
  local name=$1 x=$2 d=$3 f; shift 3
  local cases=() kv=(); for f in "$@"; do cases+=(--case "$f"); done
  [[ "$*" == *e4m3* ]] && kv=(--kv-dtype e4m3)
  timeout 120 $x bench-all --suite decode --kernels persistent-hopper "${cases[@]}" "${kv[@]}" --no-peers --no-gemm \
    --repeats 5 --check-rows 32 --decode-head-dim $d --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name rc=$? (${SECONDS}s)" >> $R
  grep -E "\| persistent-hopper \| (contiguous|paged 64|e4m3[^|]*) \|" $L/$name/bench-decode.md | cut -d'|' -f2,5,6 >> $R
  grep -E "^\| [0-9]+ \| bulk" $L/$name/bench-decode.md | cut -d'|' -f2-5 | sed 's/^/  probe/' >> $R
}
for round in 1 2; do
  for c in sq1-sk32768 sq4-sk8192; do
    bench $c-base-$round $B 256 $c-d256/contig $c-d256/paged-64
    bench $c-new-$round $N 256 $c-d256/contig $c-d256/paged-64
  done
done
for c in sq1-sk32768 sq4-sk8192; do
  bench e4m3-$c-base $B 256 $c-d256/e4m3
  bench e4m3-$c-new $N 256 $c-d256/e4m3
done
echo "== checks from ${SECONDS}s" >> $R
LEFT=$((570 - SECONDS)); [ $LEFT -gt 330 ] && LEFT=330
job() { local name=$1; shift; timeout $LEFT "$@" > $L/$name.log 2>&1; echo "$name rc=$?" >> $L/rc.txt; }
FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep job verify-forced $N verify --kernels persistent-hopper \
  --head-dims 64,128,256 --cases 1000 --seed 51431 &
FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep job verify-forced-e4m3 $N verify --kernels persistent-hopper \
  --head-dims 64,128,256 --kv-dtype e4m3 --cases 300 --seed 51432 &
FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep job verify-portable $N verify --kernels persistent-portable \
  --head-dims 64,128,256 --cases 400 --seed 51433 &
job verify-hopper $N verify --kernels persistent-hopper --head-dims 96,192,256 --cases 400 --seed 51434 &
job reliability $N reliability --kernels persistent-hopper --only determinism,batchinv --head-dims 256 \
  --determinism-runs 100 --persistent-runs 200 &
job sanitize $N sanitize --kernels persistent-hopper --pass fwd --tools memcheck,racecheck,synccheck,initcheck \
  --head-dims 64,256 --logs $L/sanitize &
wait
cat $L/rc.txt >> $R
for f in verify-forced verify-forced-e4m3 verify-portable verify-hopper; do
  echo "$f: $(grep -E 'passed, .* failed' $L/$f.log | tail -1)" >> $R
done
grep -hE "FAIL|panicked" $L/verify-*.log | cut -c1-300 | head -8 >> $R
grep -E "PASS|FAIL|SKIP" $L/reliability.log | cut -c1-220 >> $R
echo "sanitize: $(grep -E 'sanitize:' $L/sanitize.log | tail -2 | tr '\n' ' ')" >> $R
grep -E "errors \(" $L/sanitize.log | head -8 >> $R
echo "done (${SECONDS}s)" >> $R
python3 $H/probe_table.py $L/*.log > $L/probe-tables.md 2>&1
tar cJf $OUT/logs.tar.xz -C /tmp logs 2>/dev/null
cat $R
