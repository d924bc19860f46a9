#!/usr/bin/env bash
# verify at V's own head dim, alone on the machine: run.sh's three verify jobs shared it with the
# package's tests and the sanitizer runs and stopped at their time limit (0 failed up to there).
# Both generation-5 forwards, 1000 random cases each (a fifth of the dense cases with a V dim of
# their own) and the edge list with its (192, 128) cases.
# From the repo root, with a stripped release xtask of the tree in .carry/xtask:
#   bash docs/results/2026-11-29-head-dim-v-h200/verify.sh
# Output in $OUT/head-dim-v-verify: verify.txt, logs-verify.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
O=$OUT/head-dim-v-verify; mkdir -p $O
X=.carry/xtask; R=$O/verify.txt; L=/tmp/logs-verify; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
for k in persistent-hopper persistent-portable; do
  (timeout 420 $X verify --kernels $k --cases 1000 --seed 3711 > $L/verify-$k.log 2>&1
   echo "verify $k rc=$? (${SECONDS}s)" >> $L/rc.txt) &
done
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify-*.log; do
  echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -1) | last progress: $(grep -E 'cases, [0-9]+ failed' $f | tail -1)" | tee -a $R
done
grep -hE "^\| persistent" $L/verify-*.log | tee -a $R
grep -hE "FAIL|panicked" $L/verify-*.log | cut -c1-400 | head -12 | tee -a $R
(cd /tmp && tar cJf $O/logs-verify.tar.xz logs-verify)
