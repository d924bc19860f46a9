#!/usr/bin/env bash
# The short-row D normalized by the row's own softmax sum (not the stored LSE), on nvidia-h200, in
# one call:
# - alone on the GPU first: short_rows_cost.py, the backward's time with every row's D from the
#   stored O (FLASHCORE_BWD_SHORT_ROW_KEYS=0) and with short rows recomputing theirs (unset), two
#   rounds of each, each in its own process (after a parallel warm-up that compiles the builds);
# - then side by side: verify --pass bwd --cases 1000 of persistent-hopper (seed 5201, the seed of
#   call 2's failure), persistent-portable (6102) and persistent-portable-atomic (6103); call 2's
#   failing case on the Hopper and portable backwards at FLASHCORE_BWD_SHORT_ROW_KEYS=0 and unset,
#   and call 1's three cases unset; sanitize --pass bwd and reliability --only backward of both.
# From the repo root with .carry/xtask and the Python wheel in .whl/. Outputs in $OUT: call3.txt,
# timing.md, logs-call3.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/call3.txt; L=/tmp/logs-call3; rm -rf $L; mkdir -p $L
T=docs/results/2026-12-01-short-row-delta-h200/short_rows_cost.py
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
python3 -m pip install -q --no-deps --target /tmp/fcpy .whl/flashcore-*.whl > $L/pip.log 2>&1
(PYTHONPATH=/tmp/fcpy timeout 200 python3 $T --warm > $L/warm-default.log 2>&1) &
(env FLASHCORE_BWD_SHORT_ROW_KEYS=0 PYTHONPATH=/tmp/fcpy timeout 200 python3 $T --warm > $L/warm-0.log 2>&1) &
wait
echo "warm-up done (${SECONDS}s)" | tee -a $R
echo "| row | FLASHCORE_BWD_SHORT_ROW_KEYS | ms | kernel |" > $OUT/timing.md
echo "|---|---|---:|---|" >> $OUT/timing.md
for round in 1 2; do
  env FLASHCORE_BWD_SHORT_ROW_KEYS=0 PYTHONPATH=/tmp/fcpy timeout 90 python3 $T >> $OUT/timing.md 2>> $L/timing.err
  PYTHONPATH=/tmp/fcpy timeout 90 python3 $T >> $OUT/timing.md 2>> $L/timing.err
done
echo "timing done (${SECONDS}s)" | tee -a $R
LEFT=$((580 - SECONDS))
H=persistent-hopper; P=persistent-portable; A=persistent-portable-atomic
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-1000-hopper $LEFT $X verify --pass bwd --kernels $H --cases 1000 --seed 5201
job verify-1000-portable $LEFT $X verify --pass bwd --kernels $P --cases 1000 --seed 6102
job verify-1000-atomic $LEFT $X verify --pass bwd --kernels $A --cases 1000 --seed 6103
NEW='b=3,hq=13,hkv=1,sq=451,sk=512,d=64,dtype=f16,causal=0,layout=bhsd,seed=15965751319295041324,varlen=1,wl=1,wr=457,alibi=batch'
CAP='b=4,hq=1,hkv=1,sq=280,sk=512,d=64,dtype=bf16,causal=0,layout=bhsd,seed=6881284390085389163,varlen=1,wl=1,softcap=30,alibi=head'
F16='b=3,hq=1,hkv=1,sq=385,sk=116,d=128,dtype=f16,causal=0,layout=bshd,seed=6264817986210680452,varlen=1,wl=1,wr=1'
D56='b=3,hq=3,hkv=3,sq=346,sk=128,d=56,dtype=bf16,causal=0,layout=bshd,seed=1309679801090461516,varlen=1,wl=1,wr=67,softcap=50.5,alibi=head'
for k in $H $P; do
  job case-NEW-$k-t0 200 env FLASHCORE_BWD_SHORT_ROW_KEYS=0 FLASHCORE_CACHE_DIR=/tmp/fc-0 $X verify --pass bwd --kernels $k --no-shrink --case "$NEW"
  for c in NEW CAP F16 D56; do
    job case-$c-$k 200 $X verify --pass bwd --kernels $k --no-shrink --case "${!c}"
  done
done
job sanitize $LEFT nice -n 5 $X sanitize --pass bwd --kernels $H,$P --logs $L/san
job rel-backward $LEFT nice -n 5 $X reliability --kernels $H,$P --only backward --no-huge --backward-runs 200
wait
sort $L/rc.txt | tee -a $R
for f in $L/case-*.log; do echo "$(basename $f .log): $(grep -oE '(PASS|FAIL) ratio [0-9.]+|FAIL[^;]*|ratio [0-9.]+ \((f16|bf16)\)' $f | head -2 | tr '\n' ' ')" | tee -a $R; done
for v in hopper portable atomic; do
  echo "verify-1000-$v: $(grep -E 'passed, .* failed' $L/verify-1000-$v.log | tail -1)" | tee -a $R
  grep -hE "^\| persistent" $L/verify-1000-$v.log | tail -1 | tee -a $R
done
grep -hE "FAIL|panicked" $L/verify-1000-*.log | cut -c1-400 | head -8 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
grep -E "^\| backward \| " $L/rel-backward.log | cut -c1-160 | tee -a $R; grep -E "^reliability: [0-9]" $L/rel-backward.log | tee -a $R
cat $OUT/timing.md
(cd /tmp && tar cJf $OUT/logs-call3.tar.xz logs-call3)
