#!/usr/bin/env bash
# Call 4: the first and last launches as committed (group-major rows, varlen rows past a sequence
# skipped; the main kernel's PTX unchanged) against the tree before (.carry/xtask-base):
# - ncu times of the three kernels, both trees, on three rows and their dense twins;
# - bwd-modes varlen rows, both trees interleaved, two rounds (the window row by ncu only);
# - then, side by side: verify --pass bwd --cases 1000 (modes drawn), sanitize --pass bwd
#   (memcheck, racecheck, initcheck) and reliability's backward check, all on the new tree.
# From the repo root, with .carry/xtask and .carry/xtask-base (release, stripped):
#   bash docs/results/2026-12-02-hopper-bwd-schedule-h200/call4.sh
# Outputs in $OUT/call4: summary.txt, ncu-*.csv, modes-*.md, verify.txt, sanitize.txt,
# reliability.txt, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
O=$OUT/call4; mkdir -p $O
R=$O/summary.txt; L=/tmp/logs-call4; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
prof() { # arm label case
  X=.carry/xtask; [ $1 = base ] && X=.carry/xtask-base
  timeout 60 ncu --clock-control none -k regex:bwd_hopper --launch-count 240 --csv --metrics gpu__time_duration.sum \
    $X bench-all --pass bwd --suite bwd-modes --kernels $H --case "$3" --repeats 1 --sample-ms 1 \
    --out-dir $L/$1-$2 > $L/ncu-$1-$2.log 2>&1
  echo "ncu $1 $2 rc=$? (${SECONDS}s)" | tee -a $R
  grep -E '^"[0-9]+"' $L/ncu-$1-$2.log > $O/ncu-$1-$2.csv
}
for arm in base new; do
  prof $arm d64-equal-causal "d64 varlen 8x2048 causal"
  prof $arm d128-mixed-causal "d128 varlen 8 mixed causal"
  prof $arm d128-win1024 "d128 b1 s16384 win1024"
done
for run in base new base new; do
  X=.carry/xtask; [ $run = base ] && X=.carry/xtask-base
  n=$run-$SECONDS
  timeout 60 $X bench-all --pass bwd --suite bwd-modes --kernels $H --case varlen --repeats 5 \
    --out-dir $L/$n > $L/$n.log 2>&1
  echo "bwd-modes $n rc=$? (${SECONDS}s)" | tee -a $R
  cp $L/$n/bench-bwd-modes.md $O/modes-$n.md
done
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
T=$((575 - SECONDS))
job verify $T .carry/xtask verify --pass bwd --kernels $H --cases 1000 --seed 7303
job sanitize $T nice -n 5 .carry/xtask sanitize --tools memcheck,racecheck,initcheck --pass bwd --kernels $H --timeout $T
job reliability $T nice -n 5 .carry/xtask reliability --kernels $H --only backward --no-huge --backward-runs 200
wait
sort $L/rc.txt | tee -a $R
grep -aoE "$H bwd: [0-9]+/[0-9]+ cases, [0-9]+ failed" $L/verify.log | tail -1 | tee -a $R
grep -ahE "FAIL|panicked" $L/verify.log | cut -c1-400 | head -8 | tee -a $R
grep -avE "^\s*$" $L/verify.log | tail -40 > $O/verify.txt
grep -ahE "^\| |sanitize:" $L/sanitize.log | tee -a $R > $O/sanitize.txt
grep -aE "^\||reliability:| (PASS|FAIL|SKIP) " $L/reliability.log | cut -c1-300 | tee -a $R > $O/reliability.txt
(cd /tmp && tar cJf $O/logs.tar.xz logs-call4)
for f in $O/modes-*.md; do echo "== $f"; grep -E "^\| [a-z]" $f | cut -d'|' -f3,4,6-8; done | tee -a $R
echo "done (${SECONDS}s)" | tee -a $R
