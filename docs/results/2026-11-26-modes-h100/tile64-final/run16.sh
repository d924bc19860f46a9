# Sixteenth run of session 8 (H100): tile64's K and V loads through one lambda (load_kv), where
# two copies differed only in the tensor (the change review's duplicate); the PTX moved by 1-4
# lines per build. verify --cases 1000 (tile64), reliability --only modes and sanitize (tile64) side by side;
# then the paged, varlen and window suites on tile64, no peers.
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run16/run16.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run16.txt; L=/tmp/logs; mkdir -p $L /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
(timeout 250 $X verify --kernels tile64 --cases 1000 --seed 961 > $L/verify.log 2>&1; echo "verify tile64 rc=$?" >> /tmp/v/rc.txt) &
(timeout 200 $X reliability --only modes --kernels tile64 > $L/reliability-modes.log 2>&1; echo "reliability modes rc=$?" >> /tmp/v/rc.txt) &
(timeout 280 $X sanitize --kernels tile64 --logs /tmp/san1 > $L/sanitize-tile64.log 2>&1; echo "sanitize tile64 rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
echo "verify: $(grep -h 'passed, ' $L/verify.log | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" $L/verify.log | head -8 | tee -a $R
grep -E "^modes" $L/reliability-modes.log | cut -c1-70 | tee -a $R
grep -hE "^\| tile64|^sanitize: no|errors" $L/sanitize-tile64.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
for s in paged varlen window; do
  timeout 120 $X bench-all --suite $s --kernels tile64 --no-peers --out-dir /tmp/b-$s > $L/bench-$s.log 2>&1; echo "$s bench rc=$?" | tee -a $R
  cp /tmp/b-$s/bench-$s.md $L/
  grep -A30 "## Comparisons" /tmp/b-$s/bench-$s.md | grep -E "^\| [a-z]" | grep -v "^| comparison" | grep -v "peer" | cut -d"|" -f2-5 | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
