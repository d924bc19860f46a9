# Fifth run of session 12 (H100): the final kernels. Above D = 64, both schedules' dK/dV pass
# computes Sᵀ and dPᵀ in one k loop (warp_gemm_abt_pair); the atomic schedule's dQ loop is unrolled
# 8 (at D <= 64 on sm_90 only). .carry/xtask = this tree, .carry/xtask-base = 7de7707.
# (1) in parallel: verify --pass bwd --cases 1000 on both portable schedules, reliability --only
#     backward and sanitize --pass bwd on both;
# (2) bench bwd: the Hopper backward and both portable schedules with SDPA flash and cuDNN in the
#     same run (FA3 from the anchors), fp16, the ladder shapes and (2,16,8192,64), causal and not;
# (3) the deterministic schedule at the D = 128 shapes, 7de7707 against this tree, alternated twice
#     (its D <= 64 builds are unchanged: check-kernels --compare-ptx).
# Run from the repo root: bash docs/results/2026-11-26-session12-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run5.txt; L=/tmp/logs5; mkdir -p $L /tmp/v5
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
A=persistent-portable-atomic; P=persistent-portable
(timeout 300 $X verify --pass bwd --kernels $A --cases 1000 --seed 12501 > $L/verify-atomic.log 2>&1; echo "verify $A rc=$? (${SECONDS}s)" >> /tmp/v5/rc.txt) &
(timeout 300 $X verify --pass bwd --kernels $P --cases 1000 --seed 12502 > $L/verify-det.log 2>&1; echo "verify $P rc=$? (${SECONDS}s)" >> /tmp/v5/rc.txt) &
(timeout 300 $X reliability --only backward --kernels $P,$A > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v5/rc.txt) &
(timeout 300 $X sanitize --pass bwd --kernels $P,$A --logs /tmp/san5 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v5/rc.txt) &
wait
sort /tmp/v5/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify-atomic.log $L/verify-det.log | tail -8 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
SECONDS=0
timeout 280 $X bench-all --pass bwd --kernels persistent-hopper,$P,$A --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 2,16,8192,64 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb > $L/bench-bwd.log 2>&1; echo "bench bwd rc=$? (${SECONDS}s)" | tee -a $R
cp /tmp/bb/bench-bwd.* $L/ 2>/dev/null
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-[a-z-]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb/bench-bwd.md | cut -c1-200 | tee -a $R
S="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
for pass in 1 2; do for rev in base new; do
  if [ $rev = base ]; then B=.carry/xtask-base; else B=$X; fi; SECONDS=0
  timeout 100 $B bench-all --pass bwd --kernels $P $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b-$rev-$pass > $L/bench-det-$rev-$pass.log 2>&1
  echo "det $rev pass $pass rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $P \| [0-9.]+ \| [0-9.]+ \|" /tmp/b-$rev-$pass/bench-bwd.md | head -6 | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs5
