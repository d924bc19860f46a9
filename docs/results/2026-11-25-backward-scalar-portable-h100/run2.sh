# Second run of session 4: the portable backward's verify with the scalar-forward fallback
# (D = 32, 96 cases now run), backward reliability (NaN padding, 1000x determinism, grid and
# 2^31 limits) and sanitize for both backward kernels, then the first backward bench:
# bench-all --pass bwd on the four anchored shapes, causal and not, fp16, peers in the same run,
# FA3 from the anchors (copied into .carry/anchors from ../shared/anchors).
# Run from the repo root: bash docs/results/2026-11-25-session4-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run2.txt; mkdir -p /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
run() { name=$1; shift; (env "$@" > $OUT/$name.log 2>&1; echo "$name rc=$?" >> /tmp/v/rc.txt) & }
run verify-bwd-portable timeout 300 $X verify --pass bwd --kernels persistent-portable --cases 1000 --seed 21
run rel-bwd-portable timeout 300 $X reliability --only backward --kernels persistent-portable --json $OUT/rel-bwd-portable.json
run rel-bwd-scalar timeout 300 $X reliability --only backward --kernels scalar --no-huge --json $OUT/rel-bwd-scalar.json
wait
run sanitize-bwd timeout 200 $X sanitize --pass bwd --kernels persistent-portable,scalar --logs $OUT/sanitize-logs
wait
sort /tmp/v/rc.txt | tee -a $R
echo "verify: $(grep -h 'passed, ' $OUT/verify-bwd-portable.log | tail -1)" | tee -a $R
grep -h -A4 "FAIL\|shrunk" $OUT/verify-bwd-portable.log | head -20 | tee -a $R
grep -hE "PASS|FAIL|SKIP" $OUT/rel-bwd-*.log | cut -c1-160 | tee -a $R
tail -8 $OUT/sanitize-bwd.log | tee -a $R
timeout 200 $X bench-all --pass bwd --kernels persistent-portable --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --causal both --dtypes f16 --anchors .carry/anchors --out-dir $OUT/bench-bwd > $OUT/bench-bwd.log 2>&1; echo "bench bwd rc=$?" | tee -a $R
grep -E "^\|" $OUT/bench-bwd/bench-bwd.md | head -30 | cut -c1-220 | tee -a $R
