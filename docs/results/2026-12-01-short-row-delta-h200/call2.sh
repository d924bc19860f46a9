#!/usr/bin/env bash
# Call 1's verify --cases 1000 runs, which its 600 s limit cut off, alone on the GPU: persistent-
# hopper at the seed whose case failed (5201), persistent-portable and persistent-portable-atomic
# at new seeds, side by side. From the repo root with .carry/xtask. Outputs in $OUT: call2.txt,
# logs-call2.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
X=.carry/xtask; R=$OUT/call2.txt; L=/tmp/logs-call2; rm -rf $L; mkdir -p $L
SECONDS=0
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-1000-hopper 560 $X verify --pass bwd --kernels persistent-hopper --cases 1000 --seed 5201
job verify-1000-portable 560 $X verify --pass bwd --kernels persistent-portable --cases 1000 --seed 6102
job verify-1000-atomic 560 $X verify --pass bwd --kernels persistent-portable-atomic --cases 1000 --seed 6103
wait
sort $L/rc.txt | tee -a $R
for v in hopper portable atomic; do
  echo "verify-1000-$v: $(grep -E 'passed, .* failed' $L/verify-1000-$v.log | tail -1)" | tee -a $R
  grep -hE "^\| persistent" $L/verify-1000-$v.log | tail -1 | tee -a $R
done
grep -hE "FAIL|panicked" $L/verify-1000-*.log | cut -c1-400 | head -8 | tee -a $R
(cd /tmp && tar cJf $OUT/logs-call2.tar.xz logs-call2)
