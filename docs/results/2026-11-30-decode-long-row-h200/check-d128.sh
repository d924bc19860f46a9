#!/bin/bash
# The decode kernel after the combine's rework (a warp per 128-column row slice, up to 32 splits
# in one round trip) and the swizzled epilogue merge, on nvidia-h200, in one call:
# 1. in parallel: verify with every problem routed to the decode kernel (FLASHCORE_DECODE=force,
#    head dims drawn from the whole range), the same with the split count drawn per problem
#    (FLASHCORE_DECODE_SPLITS=sweep: counts past 32 take the combine's later batches), the
#    batch-invariant mode, and e4m3 caches;
# 2. the decode suite at D = 128, bf16 and e4m3 caches, beside SDPA's backends and FA3.
# Run from the repository root with a stripped release xtask of the tree in .carry/xtask and the
# FA3 and einops wheels in .carry/fa3/. Writes under $OUT: check.txt, bench-decode-128.md,
# logs-check.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/check.txt; L=/tmp/logs-check; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
pip install -q --no-deps --target /tmp/fa3pkg .carry/fa3/*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
job() { local label=$1 t=$2; shift 2; (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) & }
job verify-force 230 env FLASHCORE_DECODE=force $X verify --kernels persistent-hopper --cases 500 --seed 4101
job verify-sweep 230 env FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep $X verify --kernels persistent-hopper --cases 300 --seed 4102
job verify-bi 230 env FLASHCORE_DECODE=force $X verify --kernels persistent-hopper --batch-invariant --cases 200 --seed 4103
job verify-e4m3 230 $X verify --kernels persistent-hopper --kv-dtype e4m3 --cases 400 --seed 4104
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -1)" | tee -a $R; done
grep -hE "FAIL|panicked" $L/verify*.log | cut -c1-300 | head -12 | tee -a $R
timeout $((590 - SECONDS)) $X bench-all --suite decode --kv-dtype e4m3 --kernels persistent-hopper --fa3-path /tmp/fa3pkg --out-dir $L/decode > $L/bench-decode.log 2>&1
echo "bench decode rc=$? (${SECONDS}s)" | tee -a $R
cp $L/decode/bench-decode.md $OUT/bench-decode-128.md 2>/dev/null
sed -n '/^## Decode/,/^### e4m3/p' $L/decode/bench-decode.md | grep -E "^\| B=" | cut -d'|' -f2,5,6,8,10,11 | tee -a $R
sed -n '/^### e4m3 KV cache/,/^### [A-Z]/p' $L/decode/bench-decode.md | grep -E "^\| B=" | cut -d'|' -f2,5,6,7,9,11,12,13,14 | tee -a $R
(cd /tmp && tar cJf $OUT/logs-check.tar.xz logs-check)
