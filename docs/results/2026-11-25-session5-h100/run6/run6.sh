# Sixth run: the 128-query steps at D = 64 (FLASHCORE_HOPPER_BWD_QUERY_ROWS=128, off by default).
# Debug verify of that build (its D = 128 draws are refused by the plan and count as skipped),
# a short debug verify of the default build (same PTX as run4's), then an A/B of the D = 64 rows
# without peers (default, wide, default, wide).
# Run from the repo root: bash docs/results/2026-11-25-session5-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run6.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
FLASHCORE_HOPPER_DEBUG=1 FLASHCORE_HOPPER_BWD_QUERY_ROWS=128 timeout 45 $X verify --pass bwd --kernels persistent-hopper --cases 60 --seed 561 > $OUT/verify-wide.log 2>&1; echo "verify wide rc=$?" | tee -a $R
tail -1 $OUT/verify-wide.log | tee -a $R
grep -h -A5 "FAIL\|shrunk" $OUT/verify-wide.log | head -12 | tee -a $R
FLASHCORE_HOPPER_DEBUG=1 timeout 20 $X verify --pass bwd --kernels persistent-hopper --cases 20 --no-edge --seed 562 > $OUT/verify-default.log 2>&1; echo "verify default rc=$?" | tee -a $R
tail -1 $OUT/verify-default.log | tee -a $R
for round in 1 2; do
  for Q in 64 128; do
    FLASHCORE_HOPPER_BWD_QUERY_ROWS=$Q timeout 18 $X bench-all --pass bwd --kernels persistent-hopper --shape 4,16,2048,64 --shape 2,16,8192,64 --causal both --dtypes f16 --no-peers --out-dir /tmp/ab > /tmp/ab.log 2>&1; echo "round $round query rows $Q rc=$?" | tee -a $R
    grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \|" /tmp/ab.log | head -4 | cut -d'|' -f2-7 | tee -a $R
  done
done
