#!/usr/bin/env bash
# On nvidia-h200, in one call:
# - alone on the GPU: the decode suite's one-sequence row (1,32,8,1,32768) at head dim 512, at the
#   default split count and at 33 splits a KV head (FLASHCORE_DECODE_SPLITS=33: 264 CTAs, two full
#   rounds of the 132 SMs instead of 128 CTAs in one), beside the read probe;
# - then side by side: verify of the portable forward with every head dim drawn (8-512) and the
#   edge list, 1 000 random cases; sanitize (four tools) of the portable forward at head dim 264
#   (the padded V blocks: one 16-byte chunk of the second block is the tensors').
# From the repo root with .carry/xtask. Outputs in $OUT: call3.txt, decode-*.md, logs-call3.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
X=.carry/xtask; R=$OUT/call3.txt; L=/tmp/logs-call3; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
for s in default 33; do
  if [ $s = default ]; then E=""; else E="FLASHCORE_DECODE_SPLITS=$s"; fi
  env $E timeout 80 $X bench-all --suite decode --decode-head-dim 512 --kernels persistent-hopper --no-fa3 --no-peers \
    --case sk32768 --out-dir $L/decode-$s > $L/decode-$s.log 2>&1
  echo "decode splits=$s rc=$? (${SECONDS}s)" | tee -a $R
  cp $L/decode-$s/bench-decode.md $OUT/decode-$s.md 2>/dev/null
  grep -E "^\| " $L/decode-$s/bench-decode.md | head -12 | tee -a $R
done
LEFT=$((570 - SECONDS))
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-1000-fwd $LEFT $X verify --kernels persistent-portable --cases 1000 --seed 51301
job sanitize-264 $LEFT nice -n 5 $X sanitize --pass fwd --kernels persistent-portable --head-dims 264 --logs $L/san
wait
sort $L/rc.txt | tee -a $R
grep -E "passed, .* failed|worst ratio" $L/verify-1000-fwd.log | tail -3 | tee -a $R
grep -E "cases, [0-9]+ failed" $L/verify-1000-fwd.log | tail -1 | tee -a $R
grep -hE "FAIL|panicked" $L/verify-1000-fwd.log | cut -c1-400 | head -8 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize-264.log | tee -a $R
(cd /tmp && tar cJf $OUT/logs-call3.tar.xz logs-call3)
