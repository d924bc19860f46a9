# Second run of session 13 (H100). This tree: the consumers' non-overlapped path (80-query steps at
# D = 128, and 128-query steps at D = 64) now commits Sᵀ and dPᵀ as two groups and computes Pᵀ
# while dPᵀ runs (before, one group, both waited for). .carry/xtask = this tree; .carry/xtask-r1 =
# run1's binary (the same kernels without that change; its D = 64 builds are the committed ones).
# (1) in parallel: verify --pass bwd persistent-hopper with FLASHCORE_HOPPER_DEBUG=1, once with
#     80-query steps (D = 128 only) and once with the defaults;
# (2) D = 128 ladder shapes, causal and not, no peers, alternated twice: 64 rows, 80 rows (run1's
#     binary), 80 rows (this tree);
# (3) D = 64 shapes, causal and not, no peers, alternated twice: run1's binary against this tree.
# Run from the repo root: bash docs/results/2026-11-26-session13-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; X1=$PWD/.carry/xtask-r1; R=$OUT/run2.txt; L=/tmp/logs2; mkdir -p $L /tmp/v2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
H=persistent-hopper
SECONDS=0
(FLASHCORE_HOPPER_DEBUG=1 FLASHCORE_HOPPER_BWD_QUERY_ROWS=80 timeout 240 $X verify --pass bwd --kernels $H --cases 200 --seed 13201 > $L/verify-80-debug.log 2>&1; echo "verify 80 rows debug rc=$? (${SECONDS}s)" >> /tmp/v2/rc.txt) &
(FLASHCORE_HOPPER_DEBUG=1 timeout 240 $X verify --pass bwd --kernels $H --cases 200 --seed 13202 > $L/verify-default-debug.log 2>&1; echo "verify default debug rc=$? (${SECONDS}s)" >> /tmp/v2/rc.txt) &
wait
sort /tmp/v2/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk|panick" $L/verify-80-debug.log $L/verify-default-debug.log | head -12 | tee -a $R
row() { grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $H \| [0-9.]+ \| [0-9.]+ \|" $1/bench-bwd.md | head -6 | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R; }
S="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
for pass in 1 2; do for v in 64 80-r1 80; do SECONDS=0
  B=$X; [ $v = 80-r1 ] && B=$X1; rows=${v%-r1}
  FLASHCORE_HOPPER_BWD_QUERY_ROWS=$rows timeout 120 $B bench-all --pass bwd --kernels $H $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b-$v-$pass > $L/bench-$v-$pass.log 2>&1
  echo "D=128 $v pass $pass rc=$? (${SECONDS}s)" | tee -a $R; row /tmp/b-$v-$pass
done; done
S="--shape 4,16,2048,64 --shape 2,16,8192,64"
for pass in 1 2; do for v in r1 new; do SECONDS=0
  B=$X; [ $v = r1 ] && B=$X1
  timeout 100 $B bench-all --pass bwd --kernels $H $S --causal both --dtypes f16 --no-peers --out-dir /tmp/c-$v-$pass > $L/bench64-$v-$pass.log 2>&1
  echo "D=64 $v pass $pass rc=$? (${SECONDS}s)" | tee -a $R; row /tmp/c-$v-$pass
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs2
