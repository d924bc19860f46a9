# Ninth run of session 17 (H100): the 16-byte register epilogue on the mode suites, which run the
# modes builds (128-key tiles on pages, so they take the new stores; the 176-key strided build
# does not). A/B, alternating twice, no peers: .carry/xtask-base (db93483's kernels) against
# .carry/xtask (594b179): the paged, varlen and window suites and the decode suite's chunked
# prefill rows (Sq = 128, contiguous and paged).
# Run from the repo root: bash docs/results/2026-11-26-session17-h100/run9/run9.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; R=$OUT/run9.txt; L=/tmp/logs9; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs9; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for round in 1 2; do
  for b in base new; do
    x=.carry/xtask; [ $b = base ] && x=.carry/xtask-base
    for s in paged varlen window decode; do
      extra=""; [ $s = decode ] && extra="--case sq128"
      SECONDS=0
      timeout 150 $x bench-all --suite $s $extra --kernels persistent-hopper --no-peers --out-dir $L/$s-$b-$round > $L/$s-$b-$round.log 2>&1
      echo "== $s $b round $round: rc=$? (${SECONDS}s)" | tee -a $R
      grep -hE "^\| " $L/$s-$b-$round/*.md | grep -iE "persistent-hopper|contiguous|paged|B=" | grep -vE "^\| (B,|shape|case) " | cut -c1-150 | head -12 | tee -a $R
    done
    pack
  done
done
