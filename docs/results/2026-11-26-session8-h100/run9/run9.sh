# Ninth run of session 8 (H100): the Hopper schedule's heads-per-L2-section in f32 (two 64-bit
# division calls gone from every thread's prologue, before the producer's first copy).
# Mission problem, graph replay, no peers: 13cf0d5 (.carry/xtask-base), 55beae5 (.carry/xtask-prev)
# and the candidate (.carry/xtask), alternated three times; then verify --cases 400 (Hopper).
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run9/run9.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run9.txt; L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for i in 1 2 3; do for b in xtask-base xtask-prev xtask; do
  timeout 60 .carry/$b bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir /tmp/m-$b-$i > $L/mission-$b-$i.log 2>&1; echo "mission $b $i rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph" /tmp/m-$b-$i/bench-all.md | cut -d'|' -f4,7 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done; done
timeout 150 .carry/xtask verify --kernels persistent-hopper --cases 400 --seed 901 > $L/verify.log 2>&1; echo "verify rc=$?" | tee -a $R
grep -E "passed, " $L/verify.log | tail -1 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs
