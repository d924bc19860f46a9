# Final defaults: compute-sanitizer on both generation-5 paths (and the Hopper split build, forced), then reliability.
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask
timeout 200 $X sanitize --kernels persistent-hopper,persistent-portable --logs /tmp/san > $OUT/sanitize.log 2>&1; echo "sanitize rc=$?" | tee -a $OUT/rc.txt
FLASHCORE_HOPPER_SPLITS=4 timeout 100 $X sanitize --kernels persistent-hopper --tools memcheck,racecheck,synccheck --logs /tmp/san-split > $OUT/sanitize-split4.log 2>&1; echo "sanitize split4 rc=$?" | tee -a $OUT/rc.txt
timeout 280 $X reliability --kernels persistent-hopper,persistent-portable --only badinput,oob,determinism,grid,nonfinite,oom --json $OUT/rel.json > $OUT/reliability.log 2>&1; echo "reliability rc=$?" | tee -a $OUT/rc.txt
tail -4 $OUT/sanitize.log; tail -3 $OUT/sanitize-split4.log; grep -E "PASS|FAIL" $OUT/reliability.log | awk '{print $1,$2,$3}' | sort | uniq -c
