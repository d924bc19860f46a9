#!/bin/bash
# The decode kernel's combine and epilogue rework (a warp per 64-column slice of a packed row,
# only the rows a unit can have, up to 32 splits a round trip; the swizzled epilogue merge; one
# CTA an SM for 16-bit grids that fit the SMs once; e4m3 rings of 4 slots at D = 128) against the
# commit before it, on nvidia-h200, in one call:
# 1. alone on the GPU: base (.carry/xtask-base) then new (.carry/xtask) on the rows a split plan
#    takes at D = 128 (long row, (8,32,8,1,8192), speculative; bf16 and e4m3 caches), base and
#    new again, then the long row at 256 and 512 on both;
# 2. in parallel: verify with every problem routed to the decode kernel, the same with a split
#    count drawn per problem (counts past 32 take the combine's later batches), batch-invariant,
#    and e4m3 caches.
# Run from the repository root. Writes under $OUT: ab.txt, logs-ab.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/ab.txt; L=/tmp/logs-ab; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name binary head_dim "cases"
  local name=$1 x=$2 d=$3 cases=$4
  local args=(); for c in $cases; do args+=(--case $c); done
  timeout 100 $x bench-all --suite decode --kernels persistent-hopper "${args[@]}" --no-peers \
    --no-gemm --repeats 9 --decode-head-dim $d --kv-dtype e4m3 --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name (D=$d) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| graph" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,5 | sed -E 's/-hq32-hkv8//; s/-d(128|256|512)//' >> $R
  grep -E "^\| (128|256|512) \| bulk" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,3,4,5 | head -3 >> $R
}
C128="b8-hq32-hkv8-sq1-sk8192 sq4-sk8192 sk32768"
bench base-128 .carry/xtask-base 128 "$C128"
bench new-128 $X 128 "$C128"
bench base-128b .carry/xtask-base 128 "$C128"
bench new-128b $X 128 "$C128"
bench base-256 .carry/xtask-base 256 "sk32768"
bench new-256 $X 256 "sk32768"
bench new-512 $X 512 "sk32768"
T=$((570 - SECONDS))
job() { local label=$1; shift; (timeout $T "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) & }
job verify-force env FLASHCORE_DECODE=force $X verify --kernels persistent-hopper --cases 300 --seed 4301
job verify-sweep env FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep $X verify --kernels persistent-hopper --cases 200 --seed 4302
job verify-bi env FLASHCORE_DECODE=force $X verify --kernels persistent-hopper --batch-invariant --cases 150 --seed 4303
job verify-e4m3 $X verify --kernels persistent-hopper --kv-dtype e4m3 --cases 300 --seed 4304
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -1)" | tee -a $R; done
grep -hE "FAIL|panicked" $L/verify*.log | cut -c1-300 | head -8 | tee -a $R
(cd /tmp && tar cJf $OUT/logs-ab.tar.xz logs-ab)
cat $R | head -90
