#!/usr/bin/env bash
# Knob sweeps for the next changes, env only (no plan changed), on d2087be, nvidia-h200, alone on
# the GPU: the narrow D = 32 build's ring depth, key tile and warpgroups at (4,16,2048,32) and
# (2,16,8192,32); then the e4m3 decode long row (1,32,8,1,32768,128) under forced split counts and
# ring depths. From the repo root with a stripped release xtask in .carry/xtask.
# Output in $OUT: call4.txt, logs-call4.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
X=.carry/xtask; R=$OUT/call4.txt; L=/tmp/logs-call4; rm -rf $L; mkdir -p $L
SECONDS=0
n=0
narrow() { # VAR=value ...
  n=$((n + 1)); [ $SECONDS -gt 200 ] && { echo "narrow $* skipped" >> $R; return; }
  env "$@" timeout 40 $X bench-all --shape 4,16,2048,32 --shape 2,16,8192,32 --kernels persistent-hopper --no-peers \
    --no-gemm --out-dir $L/n$n > $L/n$n.log 2>&1
  echo "== narrow $* rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper \| eager" $L/n$n/bench-all.md | cut -d'|' -f2,4,7 >> $R
}
narrow FLASHCORE_HOPPER_STAGES=2
narrow FLASHCORE_HOPPER_STAGES=3
narrow FLASHCORE_HOPPER_STAGES=4
narrow FLASHCORE_HOPPER_CONSUMER_WGS=2
narrow FLASHCORE_HOPPER_CONSUMER_WGS=3
narrow FLASHCORE_HOPPER_BLOCK_N=176
narrow FLASHCORE_HOPPER_CONSUMER_WGS=3 FLASHCORE_HOPPER_STAGES=4
narrow FLASHCORE_HOPPER_STAGES=2
long() { # VAR=value ...
  n=$((n + 1)); [ $SECONDS -gt 330 ] && { echo "long $* skipped" >> $R; return; }
  env "$@" timeout 40 $X bench-all --suite decode --kernels persistent-hopper --case sq1-sk32768-d128/e4m3 --no-peers \
    --no-gemm --repeats 5 --kv-dtype e4m3 --out-dir $L/l$n > $L/l$n.log 2>&1
  echo "== long $* rc=$? (${SECONDS}s)" >> $R
  grep -E "persistent-hopper: .* us" $L/l$n.log | sed -E 's/ persistent-hopper: ([0-9.]+) us.*/ \1/' >> $R
}
long FLASHCORE_DECODE_SPLITS=33
for s in 16 24 40 66; do long FLASHCORE_DECODE_SPLITS=$s; done
for st in 2 3 6; do long FLASHCORE_DECODE_STAGES=$st; done
long FLASHCORE_DECODE_SPLITS=33
(cd /tmp && tar cJf $OUT/logs-call4.tar.xz logs-call4)
echo "(${SECONDS}s)" >> $R
cat $R
