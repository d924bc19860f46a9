# Third decode run: split-count sweep on the two rows furthest from the copy ceiling (no peers;
# their times are run2's), then determinism (1000 repeats of a split decode plan) and the new
# multi-stream load check (reliability --only streams).
# Run from the repo root: bash docs/results/2026-11-25-decode-h100/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run3.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for s in auto 8 16 24 48 66; do
  if [ $s = auto ]; then E=X=1; else E=FLASHCORE_DECODE_SPLITS=$s; fi
  env $E timeout 90 $X bench-all --suite decode --kernels persistent-hopper --no-peers --case sk32768 --case b8-hq32-hkv8-sq1-sk8192 --out-dir /tmp/sw-$s > $OUT/sweep-$s.log 2>&1
  echo "splits=$s rc=$?" | tee -a $R
  grep -E "^\| B=" /tmp/sw-$s/bench-decode.md | cut -d'|' -f2,5,6,7 | tee -a $R
done
timeout 200 $X reliability --only determinism --kernels persistent-hopper --determinism-runs 20 > $OUT/determinism.log 2>&1; echo "determinism rc=$?" | tee -a $R
grep -E "PASS|FAIL|SKIP" $OUT/determinism.log | cut -c1-220 | tee -a $R
timeout 150 $X reliability --only streams > $OUT/streams.log 2>&1; echo "streams rc=$?" | tee -a $R
grep -E "PASS|FAIL|SKIP" $OUT/streams.log | cut -c1-220 | tee -a $R
tail -3 $OUT/streams.log | tee -a $R
