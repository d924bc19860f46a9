# Twelfth run of session 10 (H100): the final tree's backward beside SDPA flash and cuDNN in the
# same run (FA3 from the anchors), both backward kernels, fp16, causal and not, the issue-14 shapes
# and (2,16,8192,64): the portable D = 64 rows on their 32-row kernels with the peers.
# Run from the repo root: bash docs/results/2026-11-26-session10-h100/run12/run12.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run12.txt; L=/tmp/logs12; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
timeout 240 $X bench-all --pass bwd --kernels persistent-hopper,persistent-portable --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 2,16,8192,64 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb > $L/bench-bwd.log 2>&1; echo "bench bwd rc=$? (${SECONDS}s)" | tee -a $R
cp /tmp/bb/bench-bwd.* $L/ 2>/dev/null
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-[a-z]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb/bench-bwd.md | cut -c1-200 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs12
