# Hopper path with 176-key tiles at D = 128 non-causal (one Q buffer, 240 consumer registers), the
# final defaults of this session: verify --cases 2000 + edge list (both gen-5 paths), sanitize
# (Hopper), reliability without the causal-only determinism checks (Hopper), the ladder with peers.
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; mkdir -p /tmp/v; R=$OUT/final6.txt
for k in persistent-hopper persistent-portable; do (timeout 300 $X verify --kernels $k --cases 2000 --json /tmp/v/verify-$k.json > /tmp/v/verify-$k.log 2>&1; echo "$k verify rc=$?" >> /tmp/v/rc.txt) & done
(timeout 200 $X sanitize --kernels persistent-hopper --logs /tmp/san > /tmp/v/sanitize.log 2>&1; echo "sanitize rc=$?" >> /tmp/v/rc.txt) &
wait; cat /tmp/v/rc.txt | tee -a $R; grep -h "persistent-.*passed" /tmp/v/*.log | tee -a $R; tail -3 /tmp/v/sanitize.log | tee -a $R
tar czf $OUT/verify.tar.gz -C /tmp v
timeout 150 $X reliability --kernels persistent-hopper --only badinput,oob,grid,nonfinite,oom --json $OUT/rel.json > $OUT/reliability.log 2>&1; echo "reliability rc=$?" | tee -a $R
grep -E "^\| " $OUT/reliability.log | awk -F'|' '{print $2,$3,$4}' | tee -a $R
timeout 250 $X bench-all --suite ladder --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir $OUT/ladder > $OUT/bench.log 2>&1; echo "bench rc=$?" | tee -a $R
