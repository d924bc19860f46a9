# Second run of session 9 (H100): the same trees as run1; run1's paged pass 1 read chunk-256 at
# 1.076 for the spread tree (a path the spread does not take at block 256). The paged suite
# (Hopper) against 7986516 (.carry/xtask-final), alternated three more times, raw times kept.
# Run from the repo root: bash docs/results/2026-11-26-session9-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run2.txt; L=/tmp/logs2; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for i in 3 4 5; do for b in xtask-final xtask; do
  timeout 60 .carry/$b bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/p-$b-$i > $L/paged-$b-$i.log 2>&1
  cp /tmp/p-$b-$i/bench-paged.md $L/paged-$b-$i.md
  echo "paged $b $i: $(grep -E 'time / contiguous time' /tmp/p-$b-$i/bench-paged.md | cut -d'|' -f2,4 | tr '\n' ' ' | sed 's/paged block //g; s/ time \/ contiguous time//g')" | tee -a $R
  echo "   µs: $(grep -E '^\| (decode|chunk|prefill)/(contig|paged-[0-9]+) \| persistent-hopper' /tmp/p-$b-$i/bench-paged.md | cut -d'|' -f2,5 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs2
