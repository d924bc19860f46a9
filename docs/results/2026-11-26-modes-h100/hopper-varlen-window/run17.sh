# Seventeenth run of session 8 (H100), the final tree (b7b5254): the varlen and window suites on the
# Hopper path (its modes build is run14's, whose varlen and window were not timed), no peers.
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run17/run17.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run17.txt; L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
for s in varlen window; do
  timeout 120 $X bench-all --suite $s --kernels persistent-hopper --no-peers --out-dir /tmp/b-$s > $L/bench-$s.log 2>&1; echo "$s bench rc=$?" | tee -a $R
  cp /tmp/b-$s/bench-$s.md $L/
  grep -A30 "## Comparisons" /tmp/b-$s/bench-$s.md | grep -E "^\| [a-z]" | grep -v "^| comparison" | grep -v "peer" | cut -d"|" -f2-5 | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
