#!/bin/bash
# Split walks that start `split * N` tiles in and wrap (FLASHCORE_DECODE_ROTATE=N), so that the
# 16 splits of a KV head do not read at offsets a power of two apart (16 MiB at D = 512), against
# N = 0 (the committed walk), interleaved, on the one-sequence long row (contiguous and paged 64);
# then verify with N = 3 under a split-count sweep.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask-r; R=$OUT/summary.txt; L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name head_dim env...
  local name=$1 d=$2; shift 2
  if [ $SECONDS -gt 170 ]; then echo "== $name skipped (${SECONDS}s)" >> $R; return; fi
  env "$@" timeout 45 $X bench-all --suite decode --kernels persistent-hopper --case sk32768-d$d/contig --case sk32768-d$d/paged \
    --no-peers --no-gemm --repeats 5 --decode-head-dim $d --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name (D=$d $*) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| (contiguous|paged)" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f5,6,7,8 >> $R
  sed -n '/^### Read probes/,/^###/p' $L/$name/bench-decode.md | grep "bulk" | head -1 | cut -d'|' -f2-5 >> $R
}
bench d512-r0 512 A=0
bench d512-r3 512 FLASHCORE_DECODE_ROTATE=3
bench d512-r1 512 FLASHCORE_DECODE_ROTATE=1
bench d512-r0b 512 A=0
bench d512-r3b 512 FLASHCORE_DECODE_ROTATE=3
bench d256-r0 256 A=0
bench d256-r3 256 FLASHCORE_DECODE_ROTATE=3
bench d256-r1 256 FLASHCORE_DECODE_ROTATE=1
bench d128-r0 128 A=0
bench d128-r3 128 FLASHCORE_DECODE_ROTATE=3
echo "== checks (${SECONDS}s)" >> $R
FLASHCORE_DECODE_ROTATE=3 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 90 $X verify --kernels persistent-hopper --cases 200 --seed 5601 > $L/verify-sweep.log 2>&1 &
FLASHCORE_DECODE_ROTATE=5 timeout 90 $X verify --kernels persistent-hopper --head-dims 256,512 --cases 150 --seed 5602 > $L/verify-plan.log 2>&1 &
wait
for f in verify-sweep verify-plan; do echo "$f: $(grep -E '^verify:|cases, [0-9]+ failed' $L/$f.log | tail -1)" >> $R; done
tar -C $OUT -cJf $OUT/logs.tar.xz logs && rm -rf $L
echo "done (${SECONDS}s)" >> $R
cat $R
