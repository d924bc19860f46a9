#!/usr/bin/env bash
# On the final tree (d2087be), nvidia-h200, one call: verify of the narrow build with three
# consumer warpgroups forced and sanitize of the Hopper forward at its default head dims (side by
# side), then, alone on the GPU, the D = 128 decode suite on bf16 and e4m3 caches beside SDPA's
# flash and cuDNN backends and FA3 (the e4m3 rows against the best bf16 peer of the same run).
# From the repo root with a stripped release xtask in .carry/xtask and the FA3 wheels in
# .carry/fa3. Output in $OUT: call3.txt, bench-decode-128.md, logs-call3.tar.xz.
set -u
export PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/call3.txt; L=/tmp/logs-call3; rm -rf $L; mkdir -p $L
SECONDS=0
P=persistent-hopper
(FLASHCORE_CACHE_DIR=/tmp/fc-3wg FLASHCORE_HOPPER_CONSUMER_WGS=3 timeout 200 $X verify --kernels $P --head-dims 8,16,24,32 \
   --cases 150 --no-edge --seed 6103 > $L/v-3wg.log 2>&1; echo "v-3wg rc=$? (${SECONDS}s)" >> $L/rc.txt) &
(FLASHCORE_CACHE_DIR=/tmp/fc-san timeout 200 $X sanitize --pass fwd --kernels $P --logs $L/san > $L/sanitize.log 2>&1
 echo "sanitize rc=$? (${SECONDS}s)" >> $L/rc.txt) &
python3 -m pip install -q --no-deps --target /tmp/fa3pkg .carry/fa3/*.whl > $L/pip.log 2>&1
wait
sort $L/rc.txt | tee $R
echo "v-3wg: $(grep -E 'passed, .* failed' $L/v-3wg.log | tail -1)" | tee -a $R
grep -hE "FAIL|panicked" $L/v-3wg.log | cut -c1-300 | head -5 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
FLASHCORE_CACHE_DIR=/tmp/fc timeout $((560 - SECONDS)) $X bench-all --suite decode --kv-dtype e4m3 --kernels $P \
  --fa3-path /tmp/fa3pkg --out-dir $L/d128 > $L/d128.log 2>&1
echo "decode suite rc=$? (${SECONDS}s)" | tee -a $R
cp $L/d128/bench-decode.md $OUT/bench-decode-128.md 2>/dev/null
grep -E "^\| " $L/d128/bench-decode.md 2>/dev/null | head -40 | tee -a $R
(cd /tmp && tar cJf $OUT/logs-call3.tar.xz logs-call3)
echo "(${SECONDS}s)" | tee -a $R
