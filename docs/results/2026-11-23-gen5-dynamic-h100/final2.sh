# Final defaults: verify --cases 2000 on both generation-5 paths, then the ladder with peers.
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; mkdir -p /tmp/v
for k in persistent-hopper persistent-portable; do (timeout 300 $X verify --kernels $k --cases 2000 --json /tmp/v/verify-$k.json > /tmp/v/verify-$k.log 2>&1; echo "$k verify rc=$?" >> /tmp/v/rc.txt) & done
wait; cat /tmp/v/rc.txt; grep -h "persistent-.*passed" /tmp/v/*.log
tar czf $OUT/verify.tar.gz -C /tmp v
timeout 290 $X bench-all --suite ladder --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir $OUT > $OUT/bench.log 2>&1; echo "bench rc=$?"
