# Twelfth run of session 13 (H100): the session's final Hopper backward (bee83fc): 80-query steps
# at D = 128 without causal masking, Pᵀ under dPᵀ at D = 64, copies before stats (run8's tree),
# plus the dK/dV epilogue through shared memory (run10) and the one-CTA-a-block dQ convert (run11).
# (1) in parallel: verify --pass bwd --cases 1000, reliability --only backward, sanitize --pass bwd,
#     all on persistent-hopper;
# (2) the backward bench: the Hopper backward and both portable schedules with SDPA flash and cuDNN
#     in the same run (FA3 from the anchors), fp16, the ladder shapes and (2,16,8192,64), causal
#     and not; twice, to show the spread between bench runs.
# Run from the repo root: bash docs/results/2026-11-26-session13-h100/run12/run12.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run12.txt; L=/tmp/logs12; mkdir -p $L /tmp/v12
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
H=persistent-hopper
SECONDS=0
(timeout 420 $X verify --pass bwd --kernels $H --cases 1000 --seed 14201 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v12/rc.txt) &
(timeout 420 $X reliability --only backward --kernels $H > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v12/rc.txt) &
(timeout 420 $X sanitize --pass bwd --kernels $H --logs /tmp/san12 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v12/rc.txt) &
wait
sort /tmp/v12/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify.log | tail -6 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
for rep in 1 2; do SECONDS=0
  timeout 280 $X bench-all --pass bwd --kernels $H,persistent-portable,persistent-portable-atomic --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 2,16,8192,64 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb$rep > $L/bench-bwd-$rep.log 2>&1; echo "bench bwd rep $rep rc=$? (${SECONDS}s)" | tee -a $R
  mkdir -p $L/rep$rep; cp /tmp/bb$rep/bench-bwd.* $L/rep$rep/ 2>/dev/null
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-[a-z-]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb$rep/bench-bwd.md | head -10 | cut -c1-200 | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable(-atomic)? \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb$rep/bench-bwd.md | cut -d'|' -f2,4,5,6,8,9 | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs12
