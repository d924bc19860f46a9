# New portable default (sm_90, D = 128: 7 consumer warps, 1 CTA/SM, 128-key tiles): verify 2000
# random cases + the edge list, verify with the dynamic schedule forced, compute-sanitizer (default
# and forced dynamic), reliability (incl. 1000-run determinism). Power/clock state first.
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/val1.txt
nvidia-smi -q -d POWER,PERFORMANCE,CLOCK > $OUT/smi-q.txt 2>&1
grep -E "Current Power Limit|Default Power Limit|Max Power Limit|Enforced Power|SW Power Cap|HW Slowdown|Thermal" $OUT/smi-q.txt | head -12 | tee -a $R
(timeout 300 $X verify --kernels persistent-portable --cases 2000 --json $OUT/verify-portable.json > /tmp/vp.log 2>&1; echo "verify 2000 rc=$? $(grep -E '^ *persistent-portable:' /tmp/vp.log)" >> /tmp/vr.txt) &
(FLASHCORE_PORTABLE_DYNAMIC=1 timeout 300 $X verify --kernels persistent-portable --cases 300 --no-shrink > /tmp/vd.log 2>&1; echo "verify dynamic-forced 300 rc=$? $(grep -E '^ *persistent-portable:' /tmp/vd.log)" >> /tmp/vr.txt) &
wait; cat /tmp/vr.txt | tee -a $R; grep -i "fail" /tmp/vp.log /tmp/vd.log | head -10 | tee -a $R
timeout 120 $X sanitize --kernels persistent-portable --logs /tmp/san > $OUT/sanitize.log 2>&1; echo "sanitize rc=$?" | tee -a $R; tail -3 $OUT/sanitize.log | tee -a $R
FLASHCORE_PORTABLE_DYNAMIC=1 timeout 120 $X sanitize --kernels persistent-portable --logs /tmp/san-dyn > $OUT/sanitize-dynamic.log 2>&1; echo "sanitize dynamic-forced rc=$?" | tee -a $R; tail -3 $OUT/sanitize-dynamic.log | tee -a $R
timeout 280 $X reliability --kernels persistent-portable --only badinput,oob,determinism,grid,nonfinite,oom --json $OUT/rel.json > $OUT/reliability.log 2>&1; echo "reliability rc=$?" | tee -a $R
grep -E "PASS|FAIL" $OUT/reliability.log | awk '{print $1,$2,$3}' | sort | uniq -c | tee -a $R
