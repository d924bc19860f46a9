#!/usr/bin/env bash
# After call 2, whose reliability run passed badinput, oob, determinism, nonfinite, modes,
# batchinv and oom and then ran out of its 545 s beside the 1000-case verify: the checks it did not
# reach (grid, soak, streams, backward) on persistent-hopper, alone; then the wide builds' knobs
# timed alone: the Q/dO ring at 3 stages and the L2 section size, against the plan's defaults, at
# the D = 256 rows of call 1 (fp16, backward alone, no peers).
# From the repo root with a stripped release xtask in .carry/xtask. Outputs in $OUT: call3.txt,
# logs-call3.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
X=.carry/xtask; R=$OUT/call3.txt; L=/tmp/logs-call3; rm -rf $L; mkdir -p $L
SECONDS=0
H=persistent-hopper
timeout 330 $X reliability --kernels $H --only grid,soak,streams,backward --no-huge --soak-cases 1500 \
    --persistent-runs 200 --backward-runs 200 > $L/reliability.log 2>&1
echo "reliability rc=$? (${SECONDS}s)" | tee $R
grep -E "^\| [a-z]+ \| " $L/reliability.log | cut -c1-200 | tee -a $R
grep -E "^reliability: [0-9]" $L/reliability.log | tee -a $R
SH="--shape 4,16,2048,256 --shape 1,16,8192,256 --shape 4,16,2048,192"
for v in base FLASHCORE_HOPPER_BWD_STAGES=3 FLASHCORE_HOPPER_BWD_SECTION_UNITS=264 FLASHCORE_HOPPER_BWD_SECTION_UNITS=132; do
  [ $SECONDS -gt 520 ] && break
  env ${v/base/FC_NONE=1} timeout $((560 - SECONDS)) $X bench-all --pass bwd $SH --kernels $H --no-peers --no-gemm --out-dir $L/b-$v > $L/b-$v.log 2>&1
  echo "== $v rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| (4|1),16,[0-9]+,(192|256) \| f16 \| (no|yes) \| persistent-hopper \|" $L/b-$v/bench-bwd.md | cut -d'|' -f2-6 | sort -u | tee -a $R
done
(cd /tmp && tar cJf $OUT/logs-call3.tar.xz logs-call3)
