# Fourteenth run of session 10 (H100): the head dims the plan gives 32-row tiles by analogy, never
# timed: D = 96 (the 8-warp dK/dV kernel, like D = 128) and D = 32 (the register path, like D = 64).
# Same-run A/B against the 16-row kernels (FLASHCORE_PORTABLE_BWD_TILES=narrow), two passes, no
# peers, fp16, causal and not.
# Run from the repo root: bash docs/results/2026-11-26-session10-h100/run14/run14.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run14.txt; L=/tmp/logs14; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for pass in 1 2; do for t in narrow wide; do
  FLASHCORE_PORTABLE_BWD_TILES=$t timeout 60 $X bench-all --pass bwd --kernels persistent-portable --shape 4,16,2048,96 --shape 4,16,2048,32 --shape 8,32,4096,96 --causal both --dtypes f16 --no-peers --out-dir /tmp/p$t$pass > $L/p-$t-$pass.log 2>&1; echo "$t pass $pass rc=$?" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable \| [0-9.]+ \| [0-9.]+ \|" /tmp/p$t$pass/bench-bwd.md | head -6 | cut -d'|' -f2-7 | sed "s/^/$t-$pass |/" | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs14
