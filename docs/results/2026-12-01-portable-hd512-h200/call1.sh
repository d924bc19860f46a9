#!/usr/bin/env bash
# Head dims 264-512 on the portable generation-5 forward (the V-blocked 512 build), and the
# backward's 1 000-case sweep on the committed short-row form, on nvidia-h200, in one call:
# - alone on the GPU: verify's edge list at 512 (a smoke test), then bench-all of the portable
#   path and the scalar forward (the path that took these dims before) at (1,16,2048,512) and
#   (2,16,4096,512), f16, causal and not, SDPA's backends timed in the same run;
# - then side by side: verify of the portable forward with head dims drawn from 264-512 (200
#   cases); verify --pass bwd --cases 1000 of persistent-hopper, persistent-portable and
#   persistent-portable-atomic; sanitize (four tools) of the portable forward at 512;
#   reliability of the portable forward at 512 (oob, determinism, grid, nonfinite, modes).
# From the repo root with .carry/xtask. Outputs in $OUT: call1.txt, bench/, logs-call1.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
X=.carry/xtask; R=$OUT/call1.txt; L=/tmp/logs-call1; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
P=persistent-portable
timeout 200 $X verify --kernels $P --head-dims 512 --edge-only --seed 51201 > $L/smoke-edge-512.log 2>&1
echo "smoke rc=$? (${SECONDS}s): $(grep -E 'passed, .* failed' $L/smoke-edge-512.log | tail -1)" | tee -a $R
timeout 170 $X bench-all --kernels $P,scalar --shape 1,16,2048,512 --shape 2,16,4096,512 --causal both \
  --dtypes f16 --no-fa3 --max-seconds-per-kernel 60 --out-dir $OUT/bench > $L/bench.log 2>&1
echo "bench rc=$? (${SECONDS}s)" | tee -a $R
LEFT=$((575 - SECONDS))
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-1000-atomic $LEFT $X verify --pass bwd --kernels persistent-portable-atomic --cases 1000 --seed 6303
job verify-1000-hopper $LEFT $X verify --pass bwd --kernels persistent-hopper --cases 1000 --seed 5301
job verify-1000-portable $LEFT $X verify --pass bwd --kernels persistent-portable --cases 1000 --seed 6302
job verify-fwd-wide $LEFT $X verify --kernels $P --head-dims 264,320,384,448,504,512 --no-edge --cases 200 --seed 51202
job sanitize $LEFT nice -n 5 $X sanitize --pass fwd --kernels $P --head-dims 512 --logs $L/san
job reliability $LEFT nice -n 5 $X reliability --kernels $P --head-dims 512 --only oob,determinism,grid,nonfinite,modes \
  --no-huge --determinism-runs 50 --persistent-runs 50
wait
sort $L/rc.txt | tee -a $R
for v in fwd-wide 1000-hopper 1000-portable 1000-atomic; do
  echo "verify-$v: $(grep -E 'passed, .* failed' $L/verify-$v.log | tail -1)" | tee -a $R
done
grep -hE "FAIL|panicked" $L/smoke-edge-512.log $L/verify-*.log | cut -c1-400 | head -8 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
grep -E "^\| |^reliability: " $L/reliability.log | cut -c1-180 | tail -20 | tee -a $R
grep -hE "^\|" $OUT/bench/*.md 2>/dev/null | head -40 | tee -a $R
(cd /tmp && tar cJf $OUT/logs-call1.tar.xz logs-call1)
