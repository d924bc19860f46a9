# Fifth device run: the paged suite (contiguous cache vs pages of 16/64/256, shuffled table), the
# varlen suite again with its varlen-uniform diagnostic, then the dense ladder of the Hopper path
# beside the peers (regression check against the last committed ladder).
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run5.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for s in paged varlen; do
  timeout 240 $X bench-all --suite $s --kernels persistent-hopper,persistent-portable,tile64 --out-dir $OUT > $OUT/bench-$s.log 2>&1; echo "bench $s rc=$?" | tee -a $R
done
timeout 200 $X bench-all --suite ladder --kernels persistent-hopper --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir $OUT/ladder > $OUT/bench-ladder.log 2>&1; echo "bench ladder rc=$?" | tee -a $R
for s in paged varlen; do grep -A24 "## Comparisons" $OUT/bench-$s.md | grep -E "^\|" | cut -c1-200 | tee -a $R; done
grep -E "^\| " $OUT/ladder/bench-all.md | head -30 | cut -c1-220 | tee -a $R
