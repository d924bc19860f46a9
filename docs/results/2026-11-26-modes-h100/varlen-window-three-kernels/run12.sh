# Twelfth run of session 8 (H100), the final tree (run11's): reliability --only modes and
# compute-sanitizer on the Hopper path (its schedule changed after run6); then the paged suite
# (Hopper), and the varlen and window suites on the three fast kernels, no peers (their targets
# compare flashcore with flashcore).
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run12/run12.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run12.txt; L=/tmp/logs; mkdir -p $L /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
(timeout 200 $X reliability --only modes --kernels persistent-hopper > $L/reliability-modes.log 2>&1; echo "reliability modes rc=$?" >> /tmp/v/rc.txt) &
(timeout 280 $X sanitize --kernels persistent-hopper --logs /tmp/san1 > $L/sanitize-hopper.log 2>&1; echo "sanitize hopper rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
grep -E "^modes" $L/reliability-modes.log | cut -c1-70 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-hopper.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
timeout 100 $X bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/p > $L/paged.log 2>&1; echo "paged rc=$?" | tee -a $R
cp /tmp/p/bench-paged.md $L/paged.md; grep -E "time / contiguous time" /tmp/p/bench-paged.md | cut -d"|" -f2-4 | tee -a $R
for s in varlen window; do
  timeout 120 $X bench-all --suite $s --kernels persistent-hopper,persistent-portable,tile64 --no-peers --out-dir /tmp/b-$s > $L/bench-$s.log 2>&1; echo "$s bench rc=$?" | tee -a $R
  cp /tmp/b-$s/bench-$s.md $L/
  grep -A30 "## Comparisons" /tmp/b-$s/bench-$s.md | grep -E "^\| [a-z]" | grep -v "^| comparison" | cut -d"|" -f2-6 | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
