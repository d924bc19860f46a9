# Third run of session 13 (H100): the Hopper backward's new defaults. D = 128 without causal
# masking takes 80-query steps (dQᵀ = Kᵀ·dSᵀ); D = 64 (128-query steps) computes Pᵀ while dPᵀ runs.
# D = 128 causal keeps 64-query steps (its PTX is unchanged).
# (1) in parallel: verify --pass bwd --cases 1000, reliability --only backward, sanitize --pass bwd,
#     all on persistent-hopper;
# (2) the backward bench: the Hopper backward and both portable schedules with SDPA flash and cuDNN
#     in the same run (FA3 from the anchors), fp16, the ladder shapes and (2,16,8192,64), causal
#     and not.
# Run from the repo root: bash docs/results/2026-11-26-session13-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run3.txt; L=/tmp/logs3; mkdir -p $L /tmp/v3
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
H=persistent-hopper
SECONDS=0
(timeout 420 $X verify --pass bwd --kernels $H --cases 1000 --seed 13301 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v3/rc.txt) &
(timeout 420 $X reliability --only backward --kernels $H > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v3/rc.txt) &
(timeout 420 $X sanitize --pass bwd --kernels $H --logs /tmp/san3 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v3/rc.txt) &
wait
sort /tmp/v3/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify.log | tail -6 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
SECONDS=0
timeout 280 $X bench-all --pass bwd --kernels $H,persistent-portable,persistent-portable-atomic --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 2,16,8192,64 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb > $L/bench-bwd.log 2>&1; echo "bench bwd rc=$? (${SECONDS}s)" | tee -a $R
cp /tmp/bb/bench-bwd.* $L/ 2>/dev/null
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-[a-z-]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb/bench-bwd.md | cut -c1-200 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs3
