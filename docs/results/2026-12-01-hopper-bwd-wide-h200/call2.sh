#!/usr/bin/env bash
# The plan change (the Hopper backward takes 136-256, which the portable backwards took before)
# under every reliability check, on nvidia-h200, in one call:
# - xtask reliability, all of it, on persistent-hopper (the flags of
#   ../2026-12-01-narrow-head-decode-kinds-h200/call2.sh);
# - beside it (niced): reliability --only backward at 192 and 256, and verify --pass bwd of
#   persistent-hopper with 1000 random cases, head dims drawn from the whole set (8-256), modes
#   included.
# From the repo root with a stripped release xtask in .carry/xtask. Outputs in $OUT: call2.txt,
# reliability.log.xz, logs-call2.tar.xz.
set -u
X=.carry/xtask; R=$OUT/call2.txt; L=/tmp/logs-call2; rm -rf $L; mkdir -p $L
SECONDS=0
H=persistent-hopper
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (env FLASHCORE_CACHE_DIR=/tmp/fc-$label nice -n 19 timeout $t "$@" > $L/$label.log 2>&1
   echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job rel-bwd-wide 500 $X reliability --kernels $H --head-dims 192,256 --only backward --no-huge
job verify-bwd 520 $X verify --pass bwd --kernels $H --cases 1000 --seed 5201
FLASHCORE_CACHE_DIR=/tmp/fc-rel timeout 545 $X reliability --kernels $H --no-huge --soak-cases 1500 \
    --persistent-runs 200 --backward-runs 200 > $L/reliability.log 2>&1
echo "reliability rc=$? (${SECONDS}s)" > $R
wait
sort $L/rc.txt >> $R
grep -E "^\|" $L/reliability.log >> $R
echo "== reliability --only backward at 192, 256" >> $R
grep -E "^\| [a-z]+ \| " $L/rel-bwd-wide.log | cut -c1-220 >> $R; grep -E "^reliability: [0-9]" $L/rel-bwd-wide.log >> $R
echo "verify-bwd: $(grep -E 'passed, .* failed' $L/verify-bwd.log | tail -1)" >> $R
grep -hE "FAIL|panicked" $L/verify-bwd.log $L/rel-bwd-wide.log | cut -c1-400 | head -8 >> $R
xz -c $L/reliability.log > $OUT/reliability.log.xz
(cd /tmp && tar cJf $OUT/logs-call2.tar.xz --exclude=reliability.log logs-call2)
grep -cE "\| PASS \|" $R; grep -E "FAIL|rc=|verify|^reliability" $R | head -20
tail -3 $L/reliability.log
