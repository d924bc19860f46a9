# Fifth run of session 13 (H100): the Hopper backward's cost per work unit against its cost per
# step. Shapes with B·S = 8192 at H = 16, D = 128 all have 1 024 units (7.76 waves of 132 CTAs),
# and S / 80 steps a unit (S / 64 with 64-query steps), so fitting time = 8 rounds x (steps x
# t_step + t_unit) separates the two. Non-causal, fp16, no peers, both step sizes, twice.
# Run from the repo root: bash docs/results/2026-11-26-session13-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run5.txt; L=/tmp/logs5; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
H=persistent-hopper
S="--shape 8,16,1024,128 --shape 4,16,2048,128 --shape 2,16,4096,128 --shape 1,16,8192,128"
for pass in 1 2; do for rows in 64 80; do SECONDS=0
  FLASHCORE_HOPPER_BWD_QUERY_ROWS=$rows timeout 120 $X bench-all --pass bwd --kernels $H $S --causal off --dtypes f16 --no-peers --out-dir /tmp/b-$rows-$pass > $L/bench-$rows-$pass.log 2>&1
  echo "rows $rows pass $pass rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| no \| $H \| [0-9.]+ \| [0-9.]+ \|" /tmp/b-$rows-$pass/bench-bwd.md | head -4 | cut -d'|' -f2,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs5
