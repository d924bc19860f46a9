# Ninth run of session 13 (H100): where a work unit's time goes outside its steps. This tree adds
# FLASHCORE_HOPPER_BWD_TRACE=1 (trace.cuh; the default builds' PTX is unchanged): the first consumer
# thread of CTAs 0, gridDim/2 and gridDim-1 stamps %globaltimer at each unit's boundaries and prints
# the third launch's stamps. Non-causal, fp16: (4,16,2048,128), (1,16,16384,128), (4,16,2048,64).
# The printing build is slower; its bench times are not figures.
# Run from the repo root: bash docs/results/2026-11-26-session13-h100/run9/run9.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run9.txt; L=/tmp/logs9; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for s in 4,16,2048,128 1,16,16384,128 4,16,2048,64; do SECONDS=0
  FLASHCORE_HOPPER_BWD_TRACE=1 timeout 120 $X bench-all --pass bwd --kernels persistent-hopper --shape $s --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/bt > $L/trace-$s.log 2>&1
  echo "trace $s rc=$? (${SECONDS}s)" | tee -a $R
  grep "bwd-trace" $L/trace-$s.log | sort -t' ' -k3,3n -k5,5n | head -40 | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs9
