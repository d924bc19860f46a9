# Seventh run of session 11 (H100): the final tree. The atomic schedule with run4's dQ tile
# (32 x 32, k loop unrolled 4), L2 sections and the rotated query walk above D = 64 (runs 5-6),
# and launch 1 reading 16-byte chunks, several rows a warp (both schedules).
# (1) in parallel: verify --pass bwd --cases 1000 on both portable schedules, reliability --only
#     backward and sanitize --pass bwd on both;
# (2) bench bwd: both portable schedules and the Hopper backward with SDPA flash and cuDNN in the
#     same run (FA3 from the anchors), fp16, the ladder shapes and (2,16,8192,64), causal and not.
# Run from the repo root: bash docs/results/2026-11-26-session11-h100/run7/run7.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run7.txt; L=/tmp/logs7; mkdir -p $L /tmp/v7
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
A=persistent-portable-atomic; P=persistent-portable
(timeout 330 $X verify --pass bwd --kernels $A --cases 1000 --seed 11107 > $L/verify-atomic.log 2>&1; echo "verify $A rc=$? (${SECONDS}s)" >> /tmp/v7/rc.txt) &
(timeout 330 $X verify --pass bwd --kernels $P --cases 1000 --seed 11108 > $L/verify-det.log 2>&1; echo "verify $P rc=$? (${SECONDS}s)" >> /tmp/v7/rc.txt) &
(timeout 330 $X reliability --only backward --kernels $P,$A > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v7/rc.txt) &
(timeout 330 $X sanitize --pass bwd --kernels $P,$A --logs /tmp/san7 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v7/rc.txt) &
wait
sort /tmp/v7/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify-atomic.log $L/verify-det.log | tail -8 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
SECONDS=0
timeout 280 $X bench-all --pass bwd --kernels persistent-hopper,$P,$A --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 2,16,8192,64 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb > $L/bench-bwd.log 2>&1; echo "bench bwd rc=$? (${SECONDS}s)" | tee -a $R
cp /tmp/bb/bench-bwd.* $L/ 2>/dev/null
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-[a-z-]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb/bench-bwd.md | cut -c1-200 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs7
