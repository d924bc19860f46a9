# First device run of the inference modes (issue 11): verify (edge list + random cases, half of
# them drawing modes) on the kernels that claim the modes (scalar, tile64, Hopper path), then the
# ladder of the Hopper path beside the peers (its dense build changed: the producer is a warp).
# Run from the repo root with the release xtask in .carry/.
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; mkdir -p /tmp/v; R=$OUT/run1.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for k in scalar tile64 persistent-hopper; do
  (timeout 300 $X verify --kernels $k --cases ${CASES:-300} --json /tmp/v/verify-$k.json > /tmp/v/verify-$k.log 2>&1; echo "$k verify rc=$?" >> /tmp/v/rc.txt) &
done
wait
cat /tmp/v/rc.txt | tee -a $R; grep -h "passed" /tmp/v/verify-*.log | tee -a $R
grep -h -A2 "^FAIL" /tmp/v/verify-*.log | head -40 | tee -a $R
tar czf $OUT/verify.tar.gz -C /tmp v
timeout 200 $X bench-all --suite ladder --kernels persistent-hopper --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir $OUT/ladder > $OUT/bench.log 2>&1; echo "bench rc=$?" | tee -a $R
grep -E "^\| " $OUT/ladder/bench-all.md | head -40
