# Ninth run of session 12 (H100): the final tree (dV/dK paired loop, run8), the backward bench with
# peers: the Hopper backward and both portable schedules beside SDPA flash and cuDNN in the same
# run (FA3 from the anchors), fp16, the ladder shapes and (2,16,8192,64), causal and not.
# Run from the repo root: bash docs/results/2026-11-26-session12-h100/run9/run9.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=$PWD/.carry/xtask; R=$OUT/run9.txt; L=/tmp/logs9; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
timeout 250 $X bench-all --pass bwd --kernels persistent-hopper,persistent-portable,persistent-portable-atomic --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --shape 2,16,8192,64 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb > $L/bench-bwd.log 2>&1; echo "bench bwd rc=$? (${SECONDS}s)" | tee -a $R
cp /tmp/bb/bench-bwd.* $L/ 2>/dev/null
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-[a-z-]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb/bench-bwd.md | head -10 | cut -d'|' -f2,4,6,8,9 | tee -a $R
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-portable(-atomic)? \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" /tmp/bb/bench-bwd.md | cut -d'|' -f2,4,5,6,8 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs9
