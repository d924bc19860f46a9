# Fifth run, the final tree (its kernels are run3's: run4's producer change was reverted). The
# modes' reliability check and the sanitizers on the four modes kernels (key_range and the
# Hopper consumer and producer changed), then the committed varlen, paged and window suites
# with the peers in the same run.
# Run from the repo root: bash docs/results/2026-11-25-session6-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run5.txt; mkdir -p /tmp/v /tmp/logs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 100 $X reliability --only modes --kernels persistent-hopper,persistent-portable,tile64,scalar > /tmp/logs/reliability-modes.log 2>&1; echo "reliability modes rc=$?" | tee -a $R
grep -E "^modes" /tmp/logs/reliability-modes.log | cut -c1-60 | tee -a $R
(timeout 240 $X sanitize --kernels persistent-hopper,persistent-portable --logs /tmp/san1 > /tmp/logs/sanitize-persistent.log 2>&1; echo "sanitize persistent rc=$?" >> /tmp/v/rc.txt) &
(timeout 240 $X sanitize --kernels tile64,scalar --logs /tmp/san2 > /tmp/logs/sanitize-tile64-scalar.log 2>&1; echo "sanitize tile64,scalar rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
grep -hE "^\| (persistent|tile64|scalar)|^sanitize: no|errors" /tmp/logs/sanitize-*.log | grep -v "^sanitize: /" | tee -a $R
for s in varlen paged window; do
  timeout 110 $X bench-all --suite $s --kernels persistent-hopper,persistent-portable,tile64 --out-dir /tmp/b-$s > /tmp/logs/bench-$s.log 2>&1; echo "$s bench rc=$?" | tee -a $R
  cp /tmp/b-$s/bench-$s.md /tmp/logs/ 2>/dev/null
  grep -A30 "## Comparisons" /tmp/b-$s/bench-$s.md | grep -E "^\| [a-z]" | grep -v "^| comparison" | cut -d"|" -f2-6 | tee -a $R
done
tar cJf $OUT/logs.tar.xz -C /tmp logs
