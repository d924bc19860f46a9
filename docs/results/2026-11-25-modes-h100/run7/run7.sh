# Seventh device run: after the block table is read through the read-only path (__ldg) and the
# portable producer keeps 16 page lookups in flight: verify tile64 and portable again, sanitize
# both (the paged loader changed), then the paged suite.
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; mkdir -p /tmp/v; R=$OUT/run7.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for k in tile64 persistent-portable; do
  (timeout 200 $X verify --kernels $k --cases 1000 > /tmp/v/verify-$k.log 2>&1; echo "$k verify rc=$?" >> /tmp/v/rc.txt) &
done
wait
cat /tmp/v/rc.txt | tee -a $R; grep -h "passed, " /tmp/v/verify-*.log | tee -a $R
grep -h -A3 "FAIL\|shrunk" /tmp/v/verify-*.log | head -20 | tee -a $R
timeout 200 $X bench-all --suite paged --kernels persistent-hopper,persistent-portable,tile64 --out-dir $OUT > $OUT/bench-paged.log 2>&1; echo "bench paged rc=$?" | tee -a $R
timeout 180 $X sanitize --kernels tile64,persistent-portable --logs /tmp/san > $OUT/sanitize.log 2>&1; echo "sanitize rc=$?" | tee -a $R
tail -5 $OUT/sanitize.log | tee -a $R
grep -E "^\| (decode|chunk|prefill):" $OUT/bench-paged.md | grep "time / contiguous" | cut -c1-120 | tee -a $R
