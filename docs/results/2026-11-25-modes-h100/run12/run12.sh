# Twelfth device run: tile64 reads a paged tile's page one tile ahead (one-page tiles, D <= 128).
# The paged suite on tile64 first, then verify --cases 1000 and the reliability modes check.
# Run from the repo root: bash docs/results/2026-11-25-modes-h100/run12/run12.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run12.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 80 $X bench-all --suite paged --kernels tile64 --no-peers --out-dir $OUT > $OUT/bench-paged.log 2>&1; echo "bench paged rc=$?" | tee -a $R
grep -E "^\| (decode|chunk|prefill):" $OUT/bench-paged.md | grep "time / contiguous" | cut -c1-120 | tee -a $R
timeout 130 $X verify --kernels tile64 --cases 1000 > $OUT/verify-tile64.log 2>&1; echo "tile64 verify rc=$?" | tee -a $R
grep -h "passed, " $OUT/verify-tile64.log | tee -a $R
timeout 40 $X reliability --only modes --kernels tile64 > $OUT/reliability.log 2>&1; echo "reliability rc=$?" | tee -a $R
grep -E "^\| modes" $OUT/reliability.log | cut -c1-60 | tee -a $R
