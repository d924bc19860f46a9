#!/usr/bin/env bash
# Call 4: the committed backward (dQ before dK, dSᵀ by stmatrix, unequal varlen units on one CTA
# each, 1a65cc2) checked, side by side on the GPU:
# - verify --pass bwd --cases 1000 of persistent-hopper (every mode it claims drawn);
# - sanitize --pass bwd (memcheck, racecheck) of it;
# - the reliability checks call 3's time limit cut off: backward, soak (cut to 400 cases) and
#   streams (soak and streams run the forward only).
# From the repo root, with .carry/xtask (release, stripped):
#   bash docs/results/2026-12-02-hopper-bwd-grid-h200/call4.sh
# Outputs in $OUT/call4: summary.txt, verify.txt, sanitize.txt, reliability.txt, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
O=$OUT/call4; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-call4; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify 440 $X verify --pass bwd --kernels $H --cases 1000 --seed 7301
job sanitize 440 nice -n 5 $X sanitize --tools memcheck,racecheck --pass bwd --kernels $H --timeout 420
job reliability 440 nice -n 5 $X reliability --kernels $H --only backward,soak,streams --no-huge \
    --soak-cases 400 --backward-runs 200
wait
sort $L/rc.txt | tee -a $R
grep -E "passed, .* failed" $L/verify.log | tail -1 | tee -a $R
grep -aoE "$H bwd: [0-9]+/[0-9]+ cases, [0-9]+ failed" $L/verify.log | tail -1 | tee -a $R
grep -ahE "FAIL|panicked" $L/verify.log | cut -c1-400 | head -8 | tee -a $R
grep -avE "^\s*$" $L/verify.log | tail -40 > $O/verify.txt
grep -ahE "^\| |sanitize:" $L/sanitize.log | tee -a $R > $O/sanitize.txt
grep -aE "^\||reliability:| (PASS|FAIL|SKIP) " $L/reliability.log | cut -c1-300 | tee -a $R > $O/reliability.txt
(cd /tmp && tar cJf $O/logs.tar.xz logs-call4)
echo "done (${SECONDS}s)" | tee -a $R
