#!/usr/bin/env bash
# The short-row D in modes builds only (dense builds' PTX byte-identical to afb8112's) and its keys
# loaded in batches of 8, on nvidia-h200, in one short call:
# - alone first: short_rows_cost.py with FLASHCORE_BWD_SHORT_ROW_KEYS=0 and unset, one round each
#   after a parallel warm-up (the dense rows are the control: their builds did not change);
# - then side by side: the four failing cases of calls 1-2 on the Hopper and portable backwards,
#   and verify --pass bwd of both with modes drawn, as many cases as the time left allows.
# From the repo root with .carry/xtask and the wheel in .whl/. Outputs in $OUT: call4.txt,
# timing4.md, logs-call4.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/call4.txt; L=/tmp/logs-call4; rm -rf $L; mkdir -p $L
T=docs/results/2026-12-01-short-row-delta-h200/short_rows_cost.py
SECONDS=0
python3 -m pip install -q --no-deps --target /tmp/fcpy .whl/flashcore-*.whl > $L/pip.log 2>&1
(PYTHONPATH=/tmp/fcpy timeout 100 python3 $T --warm > $L/warm-default.log 2>&1) &
(env FLASHCORE_BWD_SHORT_ROW_KEYS=0 PYTHONPATH=/tmp/fcpy timeout 100 python3 $T --warm > $L/warm-0.log 2>&1) &
wait
echo "| row | FLASHCORE_BWD_SHORT_ROW_KEYS | ms | kernel |" > $OUT/timing4.md
echo "|---|---|---:|---|" >> $OUT/timing4.md
env FLASHCORE_BWD_SHORT_ROW_KEYS=0 PYTHONPATH=/tmp/fcpy timeout 60 python3 $T >> $OUT/timing4.md 2>> $L/timing.err
PYTHONPATH=/tmp/fcpy timeout 60 python3 $T >> $OUT/timing4.md 2>> $L/timing.err
echo "timing done (${SECONDS}s)" | tee -a $R
LEFT=$((180 - SECONDS))
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
NEW='b=3,hq=13,hkv=1,sq=451,sk=512,d=64,dtype=f16,causal=0,layout=bhsd,seed=15965751319295041324,varlen=1,wl=1,wr=457,alibi=batch'
CAP='b=4,hq=1,hkv=1,sq=280,sk=512,d=64,dtype=bf16,causal=0,layout=bhsd,seed=6881284390085389163,varlen=1,wl=1,softcap=30,alibi=head'
F16='b=3,hq=1,hkv=1,sq=385,sk=116,d=128,dtype=f16,causal=0,layout=bshd,seed=6264817986210680452,varlen=1,wl=1,wr=1'
D56='b=3,hq=3,hkv=3,sq=346,sk=128,d=56,dtype=bf16,causal=0,layout=bshd,seed=1309679801090461516,varlen=1,wl=1,wr=67,softcap=50.5,alibi=head'
for k in persistent-hopper persistent-portable; do
  for c in NEW CAP F16 D56; do job case-$c-$k $LEFT $X verify --pass bwd --kernels $k --no-shrink --case "${!c}"; done
  job verify-$k $LEFT $X verify --pass bwd --kernels $k --cases 120 --seed 6401 --head-dims 56,64,128
done
wait
sort $L/rc.txt | tee -a $R
for f in $L/case-*.log; do echo "$(basename $f .log): $(grep -oE '(PASS|FAIL) ratio [0-9.]+|FAIL[^;]*' $f | head -1)" | tee -a $R; done
for k in persistent-hopper persistent-portable; do
  echo "verify-$k: $(grep -E 'passed, .* failed' $L/verify-$k.log | tail -1) $(grep -cE '^(PASS|FAIL|ok)' $L/verify-$k.log)" | tee -a $R
done
grep -hE "FAIL|panicked" $L/verify-*.log | cut -c1-400 | head -6 | tee -a $R
cat $OUT/timing4.md
(cd /tmp && tar cJf $OUT/logs-call4.tar.xz logs-call4)
