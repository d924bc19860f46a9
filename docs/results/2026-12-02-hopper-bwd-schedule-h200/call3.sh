#!/usr/bin/env bash
# Call 3: the backward's first and last launches and keyless varlen CTAs (commit in README) against
# the tree before (ebe9449's kernels, .carry/xtask-base), in one process each, interleaved:
# - bwd-modes, every row (windows, varlen, softcap, ALiBi at D = 64 and 128; the dense twins show
#   the dense builds, whose first launch changed order too);
# - ncu times of the three kernels on two causal varlen rows with the new tree;
# - verify --pass bwd (modes drawn) of the new tree, cut by its time limit.
# Rounds: every row with each tree, then the varlen rows again with each.
# From the repo root, with .carry/xtask and .carry/xtask-base (release, stripped):
#   bash docs/results/2026-12-02-hopper-bwd-schedule-h200/call3.sh
# Outputs in $OUT/call3: summary.txt, modes-*.md, ncu-*.csv, verify.txt, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
O=$OUT/call3; mkdir -p $O
R=$O/summary.txt; L=/tmp/logs-call3; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
# Round 1 every row, round 2 the varlen rows again.
for run in "base all" "new all" "base varlen" "new varlen"; do
  set -- $run; arm=$1; c=""; [ $2 = varlen ] && c="--case varlen"
  X=.carry/xtask; [ $arm = base ] && X=.carry/xtask-base
  n=$arm-$2
  timeout 200 $X bench-all --pass bwd --suite bwd-modes --kernels $H $c --repeats 5 --out-dir $L/$n > $L/$n.log 2>&1
  echo "bwd-modes $n rc=$? (${SECONDS}s)" | tee -a $R
  cp $L/$n/bench-bwd-modes.md $O/modes-$n.md
done
prof() { # label case
  timeout 60 ncu --clock-control none -k regex:bwd_hopper --launch-count 240 --csv --metrics gpu__time_duration.sum \
    .carry/xtask bench-all --pass bwd --suite bwd-modes --kernels $H --case "$2" --repeats 1 --sample-ms 1 \
    --out-dir $L/$1 > $L/ncu-$1.log 2>&1
  echo "ncu $1 rc=$? (${SECONDS}s)" | tee -a $R
  grep -E '^"[0-9]+"' $L/ncu-$1.log > $O/ncu-$1.csv
}
prof d64-equal-causal "d64 varlen 8x2048 causal"
prof d128-mixed-causal "d128 varlen 8 mixed causal"
timeout $((560 - SECONDS)) .carry/xtask verify --pass bwd --kernels $H --cases 1000 --seed 7302 > $L/verify.log 2>&1
echo "verify rc=$? (${SECONDS}s)" | tee -a $R
grep -aoE "$H bwd: [0-9]+/[0-9]+ cases, [0-9]+ failed" $L/verify.log | tail -1 | tee -a $R
grep -ahE "FAIL|panicked" $L/verify.log | cut -c1-400 | head -8 | tee -a $R
grep -avE "^\s*$" $L/verify.log | tail -30 > $O/verify.txt
(cd /tmp && tar cJf $O/logs.tar.xz logs-call3)
for f in $O/modes-*.md; do echo "== $f"; grep -E "^\| [a-z]" $f | cut -d'|' -f3,4,6-8; done | tee -a $R
echo "done (${SECONDS}s)" | tee -a $R
