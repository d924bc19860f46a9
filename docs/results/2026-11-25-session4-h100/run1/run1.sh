# First run of session 4: the portable mma.sync backward (new) and the scalar one through
# verify --pass bwd, 1000 cases each (plus run10's three seq_k = 0 cases on the scalar kernel),
# and issue 12's decode sweep: verify --cases 1000 through the forced decode kernel with a split
# count drawn per case (FLASHCORE_DECODE_SPLITS=sweep, 1..=256) and with the heuristic, on both
# gen-5 paths. All six sweeps run side by side (16 CPU cores for the f64 oracle).
# Run from the repo root: bash docs/results/2026-11-25-session4-h100/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run1.txt; mkdir -p /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for c in 'b=1,hq=8,hkv=2,sq=5,sk=0,d=1,dtype=f16,causal=0,layout=bhsd,seed=1010' 'b=2,hq=2,hkv=2,sq=5,sk=0,d=64,dtype=bf16,causal=0,layout=bshd,seed=1057' 'b=2,hq=8,hkv=2,sq=5,sk=0,d=256,dtype=bf16,causal=0,layout=bhsd,seed=1151'; do
  timeout 30 $X verify --pass bwd --kernels scalar --case "$c" > /tmp/v/case.log 2>&1; echo "scalar bwd case $c rc=$? $(grep -h 'passed, ' /tmp/v/case.log | tail -1)" | tee -a $R
done
run() { name=$1; shift; (env "$@" > $OUT/$name.log 2>&1; echo "$name rc=$?" >> /tmp/v/rc.txt) & }
run bwd-portable timeout 480 $X verify --pass bwd --kernels persistent-portable --cases 1000
run bwd-scalar timeout 480 $X verify --pass bwd --kernels scalar --cases 1000 --seed 4
run decode-sweep-hopper FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 480 $X verify --kernels persistent-hopper --cases 1000 --seed 11
run decode-sweep-portable FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 480 $X verify --kernels persistent-portable --cases 1000 --seed 12
run decode-auto-hopper FLASHCORE_DECODE=force timeout 480 $X verify --kernels persistent-hopper --cases 1000 --seed 13
run decode-auto-portable FLASHCORE_DECODE=force timeout 480 $X verify --kernels persistent-portable --cases 1000 --seed 14
wait
sort /tmp/v/rc.txt | tee -a $R
for f in $OUT/*.log; do echo "$(basename $f .log): $(grep -h 'passed, ' $f | tail -1)" | tee -a $R; done
grep -h -B1 -A4 "FAIL\|shrunk" $OUT/*.log | head -40 | tee -a $R
