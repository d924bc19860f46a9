# First run of session 6. (a) Hopper paged K/V: the producer warp's lanes look up a tile's pages
# in parallel (kv_fetch.cuh): verify --cases 1000 on the Hopper path, then the paged suite
# (ratios are paged / contiguous of the same run). (b) The re-applied 128-query D = 64 backward
# option: session 5's run6 script (debug verify of the wide build, A/B of the D = 64 rows).
# Run from the repo root: bash docs/results/2026-11-25-session6-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run1.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 200 $X verify --kernels persistent-hopper --cases 1000 --seed 601 > $OUT/verify-persistent-hopper.log 2>&1; echo "hopper verify rc=$?" | tee -a $R
grep -h "passed, " $OUT/verify-persistent-hopper.log | tail -1 | tee -a $R
grep -h -A5 "FAIL\|shrunk" $OUT/verify-persistent-hopper.log | head -12 | tee -a $R
timeout 120 $X bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/paged > $OUT/bench-paged.log 2>&1; echo "paged bench rc=$?" | tee -a $R
cp /tmp/paged/*.md /tmp/paged/*.json $OUT/ 2>/dev/null
grep -E "time / contiguous time" /tmp/paged/bench-paged.md | cut -d"|" -f2-6 | tee -a $R
OUT=$OUT bash docs/results/2026-11-25-session5-h100/run6/run6.sh > /dev/null 2>&1; cat $OUT/run6.txt >> $R
cat $R
