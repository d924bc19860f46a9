#!/bin/bash
# The decode kernel as committed (the combine: a warp per 64-column row slice, only rows a unit
# can have, 32 splits a round trip; the swizzled epilogue merge; one CTA an SM for 16-bit grids
# that fit the SMs once; e4m3 rings of 4 slots at D = 128) on nvidia-h200, in one call:
# 1. alone on the GPU: base (.carry/xtask-base, the commit before) then new, on the rows a split
#    plan takes at D = 128 (long row, (8,32,8,1,8192), speculative; bf16 and e4m3 caches), then
#    the long row at 256 and 512 on new;
# 2. in parallel: verify with every problem routed to the decode kernel, the same with a split
#    count drawn per problem, batch-invariant, e4m3 caches; and xtask reliability, every check
#    (the soak cut to 300 cases and the repeated runs to 50 to fit the call).
# Run from the repository root. Writes under $OUT: final.txt, logs-final.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/final.txt; L=/tmp/logs-final; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
bench() {  # name binary head_dim "cases"
  local name=$1 x=$2 d=$3 cases=$4
  local args=(); for c in $cases; do args+=(--case $c); done
  timeout 90 $x bench-all --suite decode --kernels persistent-hopper "${args[@]}" --no-peers \
    --no-gemm --repeats 9 --decode-head-dim $d --kv-dtype e4m3 --out-dir $L/$name > $L/$name.log 2>&1
  echo "== $name (D=$d) rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| graph" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,5 | sed -E 's/-hq32-hkv8//; s/-d(128|256|512)//' >> $R
  grep -E "^\| (128|256|512) \| bulk" $L/$name/bench-decode.md 2>/dev/null | cut -d'|' -f2,3,4,5 >> $R
}
C128="b8-hq32-hkv8-sq1-sk8192 sq4-sk8192 sk32768"
bench base-128 .carry/xtask-base 128 "$C128"
bench new-128 $X 128 "$C128"
bench new-256 $X 256 "sk32768"
bench new-512 $X 512 "sk32768"
T=$((440 - SECONDS))
job() { local label=$1; shift; (timeout $T "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) & }
job reliability $X reliability --kernels persistent-hopper --no-huge --soak-cases 300 --persistent-runs 50 --backward-runs 50 --determinism-runs 50
job verify-force env FLASHCORE_DECODE=force $X verify --kernels persistent-hopper --cases 300 --seed 4201
job verify-sweep env FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep $X verify --kernels persistent-hopper --cases 200 --seed 4202
job verify-bi env FLASHCORE_DECODE=force $X verify --kernels persistent-hopper --batch-invariant --cases 150 --seed 4203
job verify-e4m3 $X verify --kernels persistent-hopper --kv-dtype e4m3 --cases 300 --seed 4204
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -1)" | tee -a $R; done
grep -hE "FAIL|panicked" $L/verify*.log | cut -c1-300 | head -8 | tee -a $R
grep -E "^\| [a-z]+ \| " $L/reliability.log | cut -d"|" -f2-4,6 | tee -a $R
grep -E "^reliability:" $L/reliability.log | tail -2 | tee -a $R
(cd /tmp && tar cJf $OUT/logs-final.tar.xz logs-final)
cat $R | head -60
