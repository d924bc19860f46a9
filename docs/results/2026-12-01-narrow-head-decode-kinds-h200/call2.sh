#!/usr/bin/env bash
# After call 1 (whose env-variable verify jobs did not start: the script put VAR=value after
# `timeout`), and after the batch-invariant fix (a decode-shaped sequence alone takes the decode
# kernel only at the head dims whose batches route it there), on nvidia-h200, in one call:
# xtask reliability, every check, on persistent-hopper (the flags of ../2026-11-30-decode-rescale-
# rings-h200/checks.sh), and beside it (niced) verify of the narrow build with forced splits,
# verify of the decode kernel on every problem (FLASHCORE_DECODE=force), and
# reliability's value checks at D = 32 and 96 (batchinv among them).
# From the repo root with a stripped release xtask in .carry/xtask. Output in $OUT: call2.txt,
# reliability.log.xz and the other logs.
set -u
X=.carry/xtask; R=$OUT/call2.txt; L=/tmp/logs-call2; rm -rf $L; mkdir -p $L
SECONDS=0
P=persistent-hopper; N=8,16,24,32
job() { # label timeout [VAR=value ...] -- cmd...
  local label=$1 t=$2; shift 2
  local vars=(); while [ "$1" != "--" ]; do vars+=("$1"); shift; done; shift
  (env FLASHCORE_CACHE_DIR=/tmp/fc-$label "${vars[@]}" nice -n 19 timeout $t "$@" > $L/$label.log 2>&1
   echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job v-split 500 FLASHCORE_HOPPER_SPLITS=3 -- $X verify --kernels $P --head-dims $N --cases 150 --no-edge --seed 6102
job v-decode 500 FLASHCORE_DECODE=force -- $X verify --kernels $P --cases 300 --seed 6105
for d in 32 96; do
  job rel-d$d 500 -- $X reliability --kernels $P --head-dims $d --only badinput,oob,determinism,nonfinite,modes,batchinv --determinism-runs 50 --persistent-runs 50
done
FLASHCORE_CACHE_DIR=/tmp/fc-rel timeout 545 $X reliability --kernels $P --no-huge --soak-cases 1500 \
    --persistent-runs 200 --backward-runs 200 > $L/reliability.log 2>&1
echo "reliability rc=$? (${SECONDS}s)" > $R
wait
sort $L/rc.txt >> $R
grep -E "^\|" $L/reliability.log >> $R
for f in $L/v-*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -1)" >> $R; done
grep -hE "FAIL|panicked" $L/v-*.log | cut -c1-300 | head -8 >> $R
for d in 32 96; do echo "== reliability D=$d" >> $R; grep -E "^\| [a-z]+ \| " $L/rel-d$d.log | cut -c1-220 >> $R; grep -E "^reliability: [0-9]" $L/rel-d$d.log >> $R; done
xz -c $L/reliability.log > $OUT/reliability.log.xz
(cd /tmp && tar cJf $OUT/logs-call2.tar.xz --exclude=reliability.log logs-call2)
grep -cE "\| PASS \|" $R; grep -E "FAIL|rc=|verify|^reliability" $R | head -20
tail -3 $L/reliability.log
