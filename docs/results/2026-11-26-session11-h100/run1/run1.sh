# First run of session 11 (H100): the atomic-dQ schedule rebuilt on the 32-row tiles (dQ = dS·K in
# the dK/dV pass, 16-byte f32 reductions into a warp-ordered accumulator).
# (1) verify --pass bwd --cases 1000, reliability --only backward, sanitize --pass bwd, all on
#     persistent-portable-atomic, in parallel;
# (2) bench bwd: both portable schedules with SDPA flash and cuDNN in the same run, fp16.
# Run from the repo root: bash docs/results/2026-11-26-session11-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run1.txt; L=/tmp/logs1; mkdir -p $L /tmp/v1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
K=persistent-portable-atomic
(timeout 300 $X verify --pass bwd --kernels $K --cases 1000 --seed 11101 > $L/verify-bwd.log 2>&1; echo "verify bwd rc=$? (${SECONDS}s)" >> /tmp/v1/rc.txt) &
(timeout 300 $X reliability --only backward --kernels $K > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v1/rc.txt) &
(timeout 300 $X sanitize --pass bwd --kernels $K --logs /tmp/san1 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v1/rc.txt) &
wait
sort /tmp/v1/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify-bwd.log | tail -6 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
SECONDS=0
timeout 280 $X bench-all --pass bwd --kernels persistent-portable,persistent-portable-atomic --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 2,16,8192,64 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb > $L/bench-bwd.log 2>&1; echo "bench bwd rc=$? (${SECONDS}s)" | tee -a $R
cp /tmp/bb/bench-bwd.* $L/ 2>/dev/null
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-[a-z-]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb/bench-bwd.md | cut -c1-200 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs1
