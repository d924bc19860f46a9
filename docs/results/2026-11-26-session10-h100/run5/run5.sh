# Fifth run of session 10 (H100): the committed backward plans. Portable: 32-row dK/dV tiles at
# head_dim 96/128 (16-row dQ), 16-row kernels at 32/64. Hopper: L2 sections of half a wave
# without causal masking.
# (1) verify --pass bwd --cases 1000 on both, reliability --only backward, sanitize --pass bwd;
# (2) the backward beside SDPA flash and cuDNN in the same run (FA3 from the anchors), fp16,
#     causal and not, the issue-14 shapes and (2,16,8192,64).
# Run from the repo root: bash docs/results/2026-11-26-session10-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run5.txt; L=/tmp/logs5; mkdir -p $L /tmp/v5
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
(timeout 330 $X verify --pass bwd --kernels persistent-portable --cases 1000 --seed 10501 > $L/verify-bwd-portable.log 2>&1; echo "verify bwd portable rc=$? (${SECONDS}s)" >> /tmp/v5/rc.txt) &
(timeout 330 $X verify --pass bwd --kernels persistent-hopper --cases 1000 --seed 10502 > $L/verify-bwd-hopper.log 2>&1; echo "verify bwd hopper rc=$? (${SECONDS}s)" >> /tmp/v5/rc.txt) &
(timeout 330 $X reliability --only backward --kernels persistent-portable,persistent-hopper > $L/reliability-bwd.log 2>&1; echo "reliability bwd rc=$? (${SECONDS}s)" >> /tmp/v5/rc.txt) &
(timeout 330 $X sanitize --pass bwd --kernels persistent-portable,persistent-hopper --logs /tmp/san5 > $L/sanitize-bwd.log 2>&1; echo "sanitize bwd rc=$? (${SECONDS}s)" >> /tmp/v5/rc.txt) &
wait
sort /tmp/v5/rc.txt | tee -a $R
grep -hE "\(bwd\): [0-9]+ passed|FAIL|shrunk" $L/verify-bwd-*.log | tail -6 | tee -a $R
grep -E "^backward" $L/reliability-bwd.log | cut -c1-110 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-bwd.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
SECONDS=0
timeout 240 $X bench-all --pass bwd --kernels persistent-hopper,persistent-portable --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 2,16,8192,64 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb > $L/bench-bwd.log 2>&1; echo "bench bwd rc=$? (${SECONDS}s)" | tee -a $R
cp /tmp/bb/bench-bwd.* $L/ 2>/dev/null
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-[a-z]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb/bench-bwd.md | cut -c1-200 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs5
