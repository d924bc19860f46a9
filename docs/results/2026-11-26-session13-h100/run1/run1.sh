# First run of session 13 (H100): the Hopper backward with 80-query steps at D = 128
# (FLASHCORE_HOPPER_BWD_QUERY_ROWS=80: dQᵀ = Kᵀ·dSᵀ, dS stored query-major by stmatrix.trans, the
# accumulator converted through a shared-memory tile). Its default stays 64 in this tree.
# (1) verify --pass bwd on persistent-hopper with 80 rows and FLASHCORE_HOPPER_DEBUG=1 (bounded
#     mbarrier waits that trap instead of hanging); its D = 64 draws are refused and skipped;
# (2) the same binary's bench at the D = 128 ladder shapes, 64 rows against 80, alternated twice,
#     causal and not, no peers.
# Run from the repo root: bash docs/results/2026-11-26-session13-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run1.txt; L=/tmp/logs1; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
H=persistent-hopper
SECONDS=0
FLASHCORE_HOPPER_DEBUG=1 FLASHCORE_HOPPER_BWD_QUERY_ROWS=80 timeout 240 $X verify --pass bwd --kernels $H --cases 200 --seed 13101 > $L/verify-80-debug.log 2>&1
echo "verify 80 rows debug rc=$? (${SECONDS}s)" | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk|panick|error" $L/verify-80-debug.log | head -12 | tee -a $R
S="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
for pass in 1 2; do for rows in 64 80; do SECONDS=0
  FLASHCORE_HOPPER_BWD_QUERY_ROWS=$rows timeout 120 $X bench-all --pass bwd --kernels $H $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b-$rows-$pass > $L/bench-$rows-$pass.log 2>&1
  echo "rows $rows pass $pass rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $H \| [0-9.]+ \| [0-9.]+ \|" /tmp/b-$rows-$pass/bench-bwd.md | head -6 | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs1
