#!/usr/bin/env bash
# After timing.sh, in one call:
# - verify --pass fwd of the two cases whose backward fails with the fast forwards' O and LSE, on
#   persistent-hopper, persistent-portable and scalar (is the forward within its own rule there?);
# - reliability --only backward of persistent-hopper (timing.sh's run of every check
#   stopped in soak, before these);
# - bench-all --pass bwd on the ladder rows with FA3's backward timed live (flash-attn3-jax
#   0.2.3 and einops carried as wheels: .carry/flash_attn3_jax-*.whl, .carry/einops-*.whl).
#   bash docs/results/2026-11-30-hopper-bwd-dense-flow-h200/fa3.sh
# Outputs in $OUT/fa3: summary.txt, bench-bwd.md (+ json), logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
O=$OUT/fa3; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-fa3; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
CAP='b=4,hq=1,hkv=1,sq=280,sk=512,d=64,dtype=bf16,causal=0,layout=bhsd,seed=6881284390085389163,varlen=1,wl=1,softcap=30,alibi=head'
F16='b=3,hq=1,hkv=1,sq=385,sk=116,d=128,dtype=f16,causal=0,layout=bshd,seed=6264817986210680452,varlen=1,wl=1,wr=1'
for k in $H persistent-portable scalar; do
  for c in CAP F16; do
    (timeout 60 $X verify --pass fwd --kernels $k --no-shrink --case "${!c}" > $L/fwd-$c-$k.log 2>&1) &
  done
done
python3 -m pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1
echo "pip rc=$?" | tee -a $R
wait
for f in $L/fwd-*.log; do echo "$(basename $f .log): $(grep -E 'PASS|FAIL|skipped' $f | head -1 | cut -c1-330)" | tee -a $R; done
timeout 90 $X reliability --kernels $H --only backward --backward-runs 200 > $L/reliability.log 2>&1
echo "reliability rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^reliability:" $L/reliability.log | tee -a $R
grep -E "FAIL|panicked" $L/reliability.log | cut -c1-300 | head -10 | tee -a $R
S="--shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
timeout 200 $X bench-all --pass bwd --kernels $H $S --fa3-path /tmp/fa3pkg --out-dir $L/bench > $L/bench.log 2>&1
echo "bench-all bwd rc=$? (${SECONDS}s)" | tee -a $R
cp $L/bench/*.md $L/bench/*.json $O/ 2>/dev/null
grep -iE "fa3|jax" $L/bench.log | head -5 | cut -c1-300 | tee -a $R
(cd /tmp && tar cJf $O/logs.tar.xz logs-fa3)
grep -E "^\| " $O/bench-bwd.md 2>/dev/null | head -9 | tee -a $R
echo "done (${SECONDS}s)" | tee -a $R
