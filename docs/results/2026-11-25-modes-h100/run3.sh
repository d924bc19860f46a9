# Third device run (new session): verify --cases 1000 on all four kernels that claim the modes
# (scalar, tile64, Hopper, portable: half of the random cases draw modes, plus the fixed mode edge
# cases), the portable path's other schedules (dynamic, debug-bounded waits, 8 warps), the
# reliability `modes` check on portable and tile64 (both changed), the CLI end to end against a
# float64 numpy reference, then compute-sanitizer on the portable path.
# Run from the repo root with release xtask and flashcore in .carry/.
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; mkdir -p /tmp/v; R=$OUT/run3.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for k in scalar tile64 persistent-hopper persistent-portable; do
  (timeout 280 $X verify --kernels $k --cases 1000 --json $OUT/verify-$k.json > /tmp/v/verify-$k.log 2>&1; echo "$k verify rc=$?" >> /tmp/v/rc.txt) &
done
wait
(FLASHCORE_PORTABLE_DYNAMIC=1 timeout 100 $X verify --kernels persistent-portable --cases 200 > /tmp/v/verify-portable-dynamic.log 2>&1; echo "portable DYNAMIC=1 verify rc=$?" >> /tmp/v/rc.txt) &
(FLASHCORE_PORTABLE_WARPS=8 timeout 100 $X verify --kernels persistent-portable --cases 200 > /tmp/v/verify-portable-warps8.log 2>&1; echo "portable WARPS=8 verify rc=$?" >> /tmp/v/rc.txt) &
(FLASHCORE_PORTABLE_DEBUG=1 timeout 100 $X verify --kernels persistent-portable --cases 100 > /tmp/v/verify-portable-debug.log 2>&1; echo "portable DEBUG=1 verify rc=$?" >> /tmp/v/rc.txt) &
wait
cat /tmp/v/rc.txt | tee -a $R; grep -h "passed, " /tmp/v/verify-*.log | tee -a $R
grep -h -A3 "FAIL" /tmp/v/verify-*.log | head -30 | tee -a $R
cp /tmp/v/*.log $OUT/
timeout 100 $X reliability --only modes --kernels tile64,persistent-portable --json $OUT/rel-modes.json > $OUT/reliability.log 2>&1; echo "reliability rc=$?" | tee -a $R
grep -E "^\| modes" $OUT/reliability.log | cut -c1-400 | tee -a $R
for a in "" "--kernel scalar" "--kernel tile64 --dtype bf16" "--kernel persistent-portable" "--kernel persistent-hopper --dtype bf16"; do
  timeout 60 python3 bench/cli_modes_check.py .carry/flashcore $a > /tmp/cli.log 2>&1; echo "cli_modes_check $a rc=$?" | tee -a $R; tail -4 /tmp/cli.log >> $OUT/cli.log
done
timeout 150 $X sanitize --kernels persistent-portable --logs /tmp/san > $OUT/sanitize.log 2>&1; echo "sanitize rc=$?" | tee -a $R
tail -4 $OUT/sanitize.log | tee -a $R
