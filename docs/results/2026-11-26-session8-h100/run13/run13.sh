# Thirteenth run of session 8 (H100): run12 read Hopper paged chunk at block 64 as 1.063 (1.00-1.01
# in runs 5 and 6, whose modes build differs from the final one only in the schedule's
# arithmetic). The paged suite on the Hopper path, the final tree (.carry/xtask) against 55beae5
# (.carry/xtask-prev), alternated twice.
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run13/run13.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run13.txt; L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for i in 1 2; do for b in xtask-prev xtask; do
  timeout 100 .carry/$b bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/p-$b-$i > $L/paged-$b-$i.log 2>&1; echo "paged $b $i rc=$?" | tee -a $R
  cp /tmp/p-$b-$i/bench-paged.md $L/paged-$b-$i.md
  grep -E "time / contiguous time" /tmp/p-$b-$i/bench-paged.md | cut -d"|" -f2,4 | tr '\n' ' ' | sed 's/paged block //g; s/ time \/ contiguous time//g' | tee -a $R; echo | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
