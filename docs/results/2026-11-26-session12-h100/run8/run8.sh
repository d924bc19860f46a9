# Eighth run of session 12 (H100): above D = 64, the dK/dV pass's second phase with dV += Pᵀ·dO and
# dK += dSᵀ·Q in one k loop (warp_gemm_ab_pair), as run4's paired Sᵀ/dPᵀ loop. FC_DVDK_PAIR through
# a temporary hook (FLASHCORE_PORTABLE_BWD_DEFINES, both schedules; not committed), against af6a7fc's
# kernels (the hook unset). (1) both schedules at the three D = 128 ladder shapes, alternated twice,
# no peers, fp16, causal and not; (2) with the hook set, in parallel: verify --pass bwd --cases 1000
# on both schedules, reliability --only backward, sanitize --pass bwd.
# Run from the repo root: bash docs/results/2026-11-26-session12-h100/run8/run8.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run8.txt; L=/tmp/logs8; mkdir -p $L /tmp/v8
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
A=persistent-portable-atomic; P=persistent-portable
S="--shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128"
for pass in 1 2; do for v in base FC_DVDK_PAIR=1; do for k in $A $P; do
  if [ $v = base ]; then unset FLASHCORE_PORTABLE_BWD_DEFINES; else export FLASHCORE_PORTABLE_BWD_DEFINES=$v; fi
  n=$k-$(echo $v | tr ',=' '_-')-$pass; SECONDS=0
  timeout 100 $X bench-all --pass bwd --kernels $k $S --causal both --dtypes f16 --no-peers --out-dir /tmp/b-$n > $L/bench-$n.log 2>&1
  echo "$k $v pass $pass rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| $k \| [0-9.]+ \| [0-9.]+ \|" /tmp/b-$n/bench-bwd.md | head -6 | cut -d'|' -f2,4,6 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done; done; done
export FLASHCORE_PORTABLE_BWD_DEFINES=FC_DVDK_PAIR=1; SECONDS=0
(timeout 300 $X verify --pass bwd --kernels $A --cases 1000 --seed 12801 > $L/verify-atomic.log 2>&1; echo "verify $A rc=$? (${SECONDS}s)" >> /tmp/v8/rc.txt) &
(timeout 300 $X verify --pass bwd --kernels $P --cases 1000 --seed 12802 > $L/verify-det.log 2>&1; echo "verify $P rc=$? (${SECONDS}s)" >> /tmp/v8/rc.txt) &
(timeout 300 $X reliability --only backward --kernels $P,$A > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v8/rc.txt) &
(timeout 300 $X sanitize --pass bwd --kernels $P,$A --logs /tmp/san8 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v8/rc.txt) &
wait
sort /tmp/v8/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify-atomic.log $L/verify-det.log | tail -8 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs8
