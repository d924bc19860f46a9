# Seventh run of session 8 (H100), the final tree: the ladder beside the peers (issue 11's
# regression check: same-run ratios against cuDNN, against the last committed ladder,
# docs/results/2026-11-23-bench-ladder-h100-final).
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run7/run7.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run7.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 400 $X bench-all --suite ladder --kernels persistent-hopper --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir /tmp/ladder > $OUT/bench-ladder.log 2>&1; echo "bench ladder rc=$?" | tee -a $R
cp /tmp/ladder/bench-all.md $OUT/ladder-bench-all.md
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| (persistent-hopper|sdpa_cudnn) \|" /tmp/ladder/bench-all.md | cut -d'|' -f2-8 | tee -a $R
