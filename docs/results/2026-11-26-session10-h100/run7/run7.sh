# Seventh run of session 10 (H100): the same-run A/B session 9 left out. The forward's paged and
# varlen suites on the Hopper path, 327bcf6 (before the quarter-of-L2 sections, 4346661, and the
# Q hand-off helpers, c0975fc) against this tree (its forward kernels are 69cfcf3's), no peers,
# alternated twice. Needs .carry/xtask-327b (a stripped release xtask built from 327bcf6).
# Run from the repo root: bash docs/results/2026-11-26-session10-h100/run7/run7.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; R=$OUT/run7.txt; L=/tmp/logs7; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for pass in 1 2; do for bin in xtask-327b xtask; do for s in paged varlen; do
  SECONDS=0
  timeout 100 .carry/$bin bench-all --suite $s --kernels persistent-hopper --no-peers --out-dir /tmp/b7-$bin-$s-$pass > $L/bench-$bin-$s-$pass.log 2>&1; echo "$bin $s pass $pass rc=$? (${SECONDS}s)" | tee -a $R
  cp /tmp/b7-$bin-$s-$pass/bench-$s.md $L/bench-$bin-$s-$pass.md 2>/dev/null
  grep -E "time / contiguous time|^\| varlen TFLOP" /tmp/b7-$bin-$s-$pass/bench-$s.md | cut -d'|' -f2,4 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done; done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs7
