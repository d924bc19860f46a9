# Second decode run: bench-all --suite decode on the Hopper path beside the peers (SDPA flash,
# cuDNN) and the copy ceiling, same run.
# Run from the repo root: bash docs/results/2026-11-25-decode-h100/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run2.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 520 $X bench-all --suite decode --kernels persistent-hopper --out-dir $OUT/decode > $OUT/bench-decode.log 2>&1; echo "bench decode rc=$?" | tee -a $R
tail -5 $OUT/bench-decode.log | tee -a $R
grep -E "^\| B=" $OUT/decode/bench-decode.md | cut -d'|' -f2-12 | cut -c1-220 | tee -a $R
