# Final defaults of this session (portable D = 128: 7 warps x 1 CTA, 128-key tiles; head-major
# non-causal order on both paths): verify --cases 2000 + edge list on both generation-5 paths,
# compute-sanitizer on both, the ladder with the peers, and the kernel-only time of the small shape (ncu).
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; mkdir -p /tmp/v; R=$OUT/final4.txt
for k in persistent-hopper persistent-portable; do (timeout 300 $X verify --kernels $k --cases 2000 --json /tmp/v/verify-$k.json > /tmp/v/verify-$k.log 2>&1; echo "$k verify rc=$?" >> /tmp/v/rc.txt) & done
wait; cat /tmp/v/rc.txt | tee -a $R; grep -h "persistent-.*passed" /tmp/v/*.log | tee -a $R
tar czf $OUT/verify.tar.gz -C /tmp v
timeout 120 $X sanitize --kernels persistent-hopper,persistent-portable --logs /tmp/san > $OUT/sanitize.log 2>&1; echo "sanitize rc=$?" | tee -a $R; tail -4 $OUT/sanitize.log | tee -a $R
timeout 290 $X bench-all --suite ladder --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir $OUT/ladder > $OUT/bench.log 2>&1; echo "bench rc=$?" | tee -a $R
for k in persistent-hopper:attention_persistent_hopper persistent-portable:attention_persistent_portable; do
  timeout 60 ncu --clock-control none -k regex:${k#*:} --launch-skip 20 --launch-count 5 --metrics gpu__time_duration.sum $X bench-all --kernels ${k%:*} --suite mission --causal off --no-peers --no-gemm --repeats 3 --sample-ms 5 --out-dir /tmp/n 2>&1 | grep -E "gpu__time_duration" | tee -a $R
done
