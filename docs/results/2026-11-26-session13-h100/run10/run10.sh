# Tenth run of session 13 (H100). This tree: the Hopper backward's dK/dV epilogue goes through each
# warpgroup's dQ staging slice (stmatrix in, whole-row 16-byte stores out) instead of 4-byte
# stores from the accumulator layout, which run9's timeline put at 5-10 us a unit.
# .carry/xtask-base = run9's binary (default builds' PTX = 921f288's).
# (1) in parallel: verify --pass bwd on persistent-hopper with FLASHCORE_HOPPER_DEBUG=1 (defaults)
#     and reliability --only backward;
# (2) the timeline at (4,16,2048,128) non-causal (FLASHCORE_HOPPER_BWD_TRACE=1);
# (3) bench, no peers, base against this tree, alternated twice, causal and not.
# Run from the repo root: bash docs/results/2026-11-26-session13-h100/run10/run10.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; XB=$PWD/.carry/xtask-base; R=$OUT/run10.txt; L=/tmp/logs10; mkdir -p $L /tmp/v10
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
H=persistent-hopper
SECONDS=0
(FLASHCORE_HOPPER_DEBUG=1 timeout 240 $X verify --pass bwd --kernels $H --cases 300 --seed 13901 > $L/verify-debug.log 2>&1; echo "verify debug rc=$? (${SECONDS}s)" >> /tmp/v10/rc.txt) &
(timeout 240 $X reliability --only backward --kernels $H > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v10/rc.txt) &
wait
sort /tmp/v10/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk|panick" $L/verify-debug.log | head -6 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
FLASHCORE_HOPPER_BWD_TRACE=1 timeout 120 $X bench-all --pass bwd --kernels $H --shape 4,16,2048,128 --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/bt > $L/trace.log 2>&1
echo "trace rc=$?" | tee -a $R
grep "bwd-trace" $L/trace.log | sort -t' ' -k3,3n -k5,5n | head -24 | tee -a $R
row() { grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $H \| [0-9.]+ \| [0-9.]+ \|" $1/bench-bwd.md | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R; }
S="--shape 8,16,1024,128 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 4,16,2048,64 --shape 2,16,8192,64"
for pass in 1 2; do for v in base new; do SECONDS=0
  B=$X; [ $v = base ] && B=$XB
  timeout 200 $B bench-all --pass bwd --kernels $H $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b-$v-$pass > $L/bench-$v-$pass.log 2>&1
  echo "$v pass $pass rc=$? (${SECONDS}s)" | tee -a $R; row /tmp/b-$v-$pass
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs10
