# Sixth device run: verify --cases 1000 on the Hopper path again (run3's one failure was a case
# the generator drew invalid), verify on tile64 and portable after the paged loader change
# (page lookups in flight in batches), then the paged suite again.
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; mkdir -p /tmp/v; R=$OUT/run6.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
(timeout 280 $X verify --kernels persistent-hopper --cases 1000 --json $OUT/verify-persistent-hopper.json > /tmp/v/verify-persistent-hopper.log 2>&1; echo "persistent-hopper verify rc=$?" >> /tmp/v/rc.txt) &
for k in tile64 persistent-portable; do
  (timeout 280 $X verify --kernels $k --cases 1000 --json $OUT/verify-$k.json > /tmp/v/verify-$k.log 2>&1; echo "$k verify rc=$?" >> /tmp/v/rc.txt) &
done
wait
cat /tmp/v/rc.txt | tee -a $R; grep -h "passed, " /tmp/v/verify-*.log | tee -a $R
grep -h -A3 "FAIL\|shrunk" /tmp/v/verify-*.log | head -20 | tee -a $R
timeout 100 $X reliability --only modes --kernels tile64,persistent-portable > $OUT/reliability.log 2>&1; echo "reliability rc=$?" | tee -a $R
grep -E "^\| modes" $OUT/reliability.log | cut -c1-120 | tee -a $R
timeout 200 $X bench-all --suite paged --kernels persistent-hopper,persistent-portable,tile64 --out-dir $OUT > $OUT/bench-paged.log 2>&1; echo "bench paged rc=$?" | tee -a $R
grep -E "^\| (decode|chunk|prefill):" $OUT/bench-paged.md | grep "time / contiguous" | cut -c1-120 | tee -a $R
