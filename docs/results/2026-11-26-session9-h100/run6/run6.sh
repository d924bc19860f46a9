# Sixth run of session 9 (H100): is the Hopper forward's D = 64 non-causal row MUFU-bound? (At
# D = 64 a 128 x 128 tile needs 16 384 exponentials, 1 024 MUFU cycles per SM, for 1 024 cycles of
# tensor work.) (1) ncu, one launch each, full set: (2,16,8192,64) and (4,16,2048,128) non-causal,
# the default build. (2) A/B: FLASHCORE_HOPPER_EXP2_FMA_EVERY=K moves every K-th group of eight
# score columns to a polynomial exp2 on the FMA pipe: K = 0 (default), 2, 4, alternated twice, on
# four non-causal ladder rows. (3) Correctness of the polynomial: verify --cases 300 and
# reliability nonfinite with K = 2.
# Run from the repo root: bash docs/results/2026-11-26-session9-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run6.txt; L=/tmp/logs6; mkdir -p $L /tmp/rep6
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
prof() { # name shape
  timeout 150 ncu --kernel-name regex:attention_persistent --launch-skip 2 --launch-count 1 --set full --import-source no -f -o /tmp/rep6/$1 \
    $X bench-all --kernels persistent-hopper --shape $2 --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/b6-$1 > $L/ncu-$1.log 2>&1
  echo "ncu $1 rc=$?" | tee -a $R
  ncu -i /tmp/rep6/$1.ncu-rep --page details --csv > $L/details-$1.csv 2>&1
  ncu -i /tmp/rep6/$1.ncu-rep --page raw --csv --metrics sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum > $L/raw-$1.csv 2>&1
  tail -1 $L/raw-$1.csv | tr ',' '\n' | tail -7 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
  head -1 $L/raw-$1.csv | tr ',' '\n' | tail -7 | tr '\n' ' ' >> $R; echo >> $R
}
prof d64 2,16,8192,64
prof d128 4,16,2048,128
SHAPES="--shape 2,16,8192,64 --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128"
for i in 1 2; do for k in 0 2 4; do
  FLASHCORE_HOPPER_EXP2_FMA_EVERY=$k timeout 90 $X bench-all --kernels persistent-hopper $SHAPES --causal off --dtypes f16 --no-peers --out-dir /tmp/b6-$k-$i > $L/ab-$k-$i.log 2>&1
  echo "exp2-fma-every=$k pass $i: $(grep -E '^\| [0-9,]+ \| f16 \| no \| persistent-hopper' /tmp/b6-$k-$i/bench-all.md | cut -d'|' -f2,7 | tr '\n' ' ')" | tee -a $R
done; done
FLASHCORE_HOPPER_EXP2_FMA_EVERY=2 timeout 120 $X verify --kernels persistent-hopper --cases 300 --seed 9601 > $L/verify-k2.log 2>&1; echo "verify K=2 rc=$?: $(grep -h 'passed, ' $L/verify-k2.log | tail -1)" | tee -a $R
FLASHCORE_HOPPER_EXP2_FMA_EVERY=2 timeout 100 $X reliability --only nonfinite --kernels persistent-hopper > $L/rel-k2.log 2>&1; echo "nonfinite K=2 rc=$?" | tee -a $R; grep -E "^nonfinite" $L/rel-k2.log | cut -c1-90 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs6
