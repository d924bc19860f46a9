# Tenth run: run9's three failing backward cases (seq_k = 0, refused by the aliasing check) again
# after the fix, then a fresh-seed backward sweep.
# Run from the repo root: bash docs/results/2026-11-25-session3-h100/run10.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run10.txt
for c in 'b=1,hq=8,hkv=2,sq=5,sk=0,d=1,dtype=f16,causal=0,layout=bhsd,seed=1010' 'b=2,hq=2,hkv=2,sq=5,sk=0,d=64,dtype=bf16,causal=0,layout=bshd,seed=1057' 'b=2,hq=8,hkv=2,sq=5,sk=0,d=256,dtype=bf16,causal=0,layout=bhsd,seed=1151'; do
  timeout 30 $X verify --pass bwd --kernels scalar --case "$c" > $OUT/case.log 2>&1; echo "case $c rc=$? $(grep -h 'passed, ' $OUT/case.log | tail -1)" | tee -a $R
done
timeout 100 $X verify --pass bwd --kernels scalar --cases 200 --seed 99 > $OUT/verify-bwd-seed99.log 2>&1; echo "verify bwd seed 99 rc=$? $(grep -h 'passed, ' $OUT/verify-bwd-seed99.log | tail -1)" | tee -a $R
