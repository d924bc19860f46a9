# Third run of the Hopper backward: A/B of this tree against run2's (c3bc4f9, carried as
# .carry/xtask-run2) in the same run, alternated. This tree: dQ issued without waiting for dV and
# dK, each warp bulk-reducing its own quarter of the dQ slice (no warpgroup barrier), K/V released
# before the dK/dV stores, one CTA per SM without causal masking. A short debug verify first.
# Run from the repo root: bash docs/results/2026-11-25-session5-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run3.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
FLASHCORE_HOPPER_DEBUG=1 timeout 100 .carry/xtask verify --pass bwd --kernels persistent-hopper --cases 80 --seed 521 > $OUT/verify-bwd-debug.log 2>&1; echo "verify debug rc=$?" | tee -a $R
tail -1 $OUT/verify-bwd-debug.log | tee -a $R
for round in 1 2; do
  for X in .carry/xtask-run2 .carry/xtask; do
    timeout 80 $X bench-all --pass bwd --kernels persistent-hopper --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --causal both --dtypes f16 --no-peers --out-dir /tmp/ab > /tmp/ab.log 2>&1; echo "round $round $X rc=$?" | tee -a $R
    grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \|" /tmp/ab.log | head -8 | cut -d'|' -f2-7 | tee -a $R
  done
done
