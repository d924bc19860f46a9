# Second device run: the reliability `modes` check (NaN in unread cache slots and pages, paged =
# contiguous, prefix sharing, varlen = alone, bad tables), the Hopper ladder again after the
# producer went back to one thread in the dense build, then compute-sanitizer over the sweep with
# the mode cases on the Hopper path and tile64 (after the bench: it would disturb the timings).
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run2.txt
timeout 150 $X reliability --only modes --kernels scalar,tile64,persistent-hopper --json $OUT/rel-modes.json > $OUT/reliability.log 2>&1; echo "reliability rc=$?" | tee -a $R
grep -E "^\| modes" $OUT/reliability.log | cut -c1-700 | tee -a $R
timeout 200 $X bench-all --suite ladder --kernels persistent-hopper --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir /tmp/ladder > $OUT/bench.log 2>&1; echo "bench rc=$?" | tee -a $R
cp /tmp/ladder/bench-all.md /tmp/ladder/bench-all.json $OUT/
timeout 220 $X sanitize --kernels persistent-hopper,tile64 --logs /tmp/san > $OUT/sanitize.log 2>&1; echo "sanitize rc=$?" | tee -a $R
tail -4 $OUT/sanitize.log | tee -a $R
