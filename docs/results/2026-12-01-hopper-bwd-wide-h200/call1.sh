#!/usr/bin/env bash
# The Hopper backward's wide builds (D = 192 and 256; 136-248 padded into them), first GPU run,
# on nvidia-h200, in one call:
# - a smoke verify at 256 and 192 with bounded mbarrier waits (FLASHCORE_HOPPER_DEBUG=1);
# - verify --pass bwd of persistent-hopper at head dims 136-256 (300 random cases + edges);
# - sanitize --pass bwd at 192 and 256;
# - the backward at (4,16,2048,D) and (1,16,8192,D), D = 192, 256, fp16, causal and not, beside
#   the portable backwards and the peers (SDPA's cuDNN and flash backends).
# From the repo root with a stripped release xtask of the tree in .carry/xtask. Outputs in $OUT:
# call1.txt (the summary), bench-bwd.md, logs-call1.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/call1.txt; L=/tmp/logs-call1; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper; A=persistent-portable-atomic; P=persistent-portable
for d in 256 192; do
  env FLASHCORE_HOPPER_DEBUG=1 timeout 120 $X verify --pass bwd --kernels $H --head-dims $d --cases 12 --no-edge --seed 5101 > $L/smoke-$d.log 2>&1
  echo "smoke-$d rc=$? (${SECONDS}s): $(grep -E 'passed, .* failed' $L/smoke-$d.log | tail -1)" | tee -a $R
done
grep -hE "FAIL|panicked|trap|error" $L/smoke-*.log | cut -c1-400 | head -6 | tee -a $R
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify 200 $X verify --pass bwd --kernels $H --head-dims 136,160,184,192,200,224,248,256 --cases 300 --seed 5102
job sanitize 200 nice -n 19 $X sanitize --pass bwd --kernels $H --head-dims 192,256 --logs $L/san
wait
sort $L/rc.txt | tee -a $R
echo "verify: $(grep -E 'passed, .* failed' $L/verify.log | tail -2 | tr '\n' ' ')" | tee -a $R
grep -hE "FAIL|panicked" $L/verify.log | cut -c1-400 | head -8 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
SH=""; for d in 192 256; do SH="$SH --shape 4,16,2048,$d --shape 1,16,8192,$d"; done
timeout $((420 - SECONDS)) $X bench-all --pass bwd $SH --kernels $H,$A --no-fa3 --out-dir $L/bench > $L/bench.log 2>&1; echo "bench rc=$? (${SECONDS}s)" | tee -a $R
cp $L/bench/bench-bwd.md $OUT/bench-bwd.md 2>/dev/null
grep -E "^\| (4|1),16" $L/bench/bench-bwd.md | head -40 >> $R
(cd /tmp && tar cJf $OUT/logs-call1.tar.xz logs-call1)
tail -30 $R
