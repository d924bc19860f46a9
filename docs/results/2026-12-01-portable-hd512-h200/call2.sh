#!/usr/bin/env bash
# The backward's 1 000-case sweep on the committed short-row form, for the two backwards whose
# sweep ran out of call 1's time (beside four other jobs): persistent-portable and
# persistent-portable-atomic, the same seeds, side by side and alone on the machine.
# From the repo root with .carry/xtask. Outputs in $OUT: call2.txt, logs-call2.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
X=.carry/xtask; R=$OUT/call2.txt; L=/tmp/logs-call2; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-1000-atomic 570 $X verify --pass bwd --kernels persistent-portable-atomic --cases 1000 --seed 6303
job verify-1000-portable 570 $X verify --pass bwd --kernels persistent-portable --cases 1000 --seed 6302
wait
sort $L/rc.txt | tee -a $R
for v in portable atomic; do
  echo "verify-1000-$v: $(grep -E 'passed, .* failed' $L/verify-1000-$v.log | tail -1)" | tee -a $R
  grep -E "bwd: [0-9]+/" $L/verify-1000-$v.log | tail -1 | tee -a $R
done
grep -hE "FAIL|panicked" $L/verify-*.log | cut -c1-400 | head -8 | tee -a $R
(cd /tmp && tar cJf $OUT/logs-call2.tar.xz logs-call2)
