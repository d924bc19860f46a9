# Ninth run of session 14 (H100): the backward prepare launch on common/row_dot.cuh (98c71b5; the
# Hopper prepare read 4 bytes a lane, one row a warp; the portable launch 1 only moves its code).
# (1) in parallel: verify --pass bwd --cases 1000 on all three backward kernels, reliability
#     --only backward and sanitize --pass bwd on all three;
# (2) ncu time of the Hopper prepare launch, a0f4835 (.carry/xtask-base) against this tree, at
#     (4,16,2048,128) and (4,16,2048,64), non-causal;
# (3) the Hopper backward, a0f4835 against this tree, alternated twice, no peers.
# Run from the repo root: bash docs/results/2026-11-26-session14-h100/run9/run9.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; B=$PWD/.carry/xtask-base; R=$OUT/run9.txt; L=/tmp/logs9; mkdir -p $L /tmp/v9
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
K=persistent-hopper,persistent-portable,persistent-portable-atomic
SECONDS=0
for k in persistent-hopper persistent-portable persistent-portable-atomic; do
  (timeout 420 $X verify --pass bwd --kernels $k --cases 1000 --seed 14901 > $L/verify-$k.log 2>&1; echo "verify $k rc=$? (${SECONDS}s)" >> /tmp/v9/rc.txt) &
done
(timeout 420 $X reliability --only backward --kernels $K > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v9/rc.txt) &
(timeout 420 $X sanitize --pass bwd --kernels $K --logs /tmp/san9 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v9/rc.txt) &
wait
sort /tmp/v9/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify-*.log | tail -8 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-100 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
for s in 4,16,2048,128 4,16,2048,64; do for v in base new; do
  bin=$X; [ $v = base ] && bin=$B
  timeout 90 ncu -k regex:bwd_hopper_prepare -c 1 --metrics gpu__time_duration.sum $bin bench-all --pass bwd --kernels persistent-hopper --shape $s --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/bn > $L/ncu-$v-$s.log 2>&1
  echo "prepare $v $s: $(grep -oE 'gpu__time_duration.sum +[a-z]+ +[0-9.,]+' $L/ncu-$v-$s.log | tr -s ' ')" | tee -a $R
done; done
for i in 1 2; do for v in base new; do
  bin=$X; [ $v = base ] && bin=$B
  timeout 120 $bin bench-all --pass bwd --kernels persistent-hopper --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 2,16,8192,64 --causal both --dtypes f16 --no-peers --anchors .carry/anchors --out-dir /tmp/b9-$v-$i > $L/bench-$v-$i.log 2>&1
  echo "$v pass $i (rc=$?): $(grep -E '^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \| [0-9.]+ \|' /tmp/b9-$v-$i/bench-bwd.md | sort -u | cut -d'|' -f2,4,6 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs9
