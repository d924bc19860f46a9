# Ninth run of the session: the scalar backward (issue 14) judged by the f64 gradient oracle;
# first-call latency with and without the aot feature (issue 13); flashcore-candle's GPU tests.
# Run from the repo root: bash docs/results/2026-11-25-session3-h100/run9.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; R=$OUT/run9.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 200 .carry/xtask verify --pass bwd --kernels scalar --cases 500 > $OUT/verify-bwd-scalar.log 2>&1; echo "verify --pass bwd scalar rc=$?" | tee -a $R
grep -h "passed, " $OUT/verify-bwd-scalar.log | tail -2 | tee -a $R
grep -h -m5 -iE "fail|panic|error" $OUT/verify-bwd-scalar.log | cut -c1-300 | tee -a $R
for b in nvrtc aot; do
  timeout 120 .carry/first_call-$b --runs 3 > $OUT/first-call-$b.md 2>&1; echo "first_call-$b rc=$?" | tee -a $R
  cat $OUT/first-call-$b.md | tail -12 | tee -a $R
done
if [ -x .carry/candle-tests ]; then
  timeout 150 .carry/candle-tests --test-threads 1 > $OUT/candle-tests.log 2>&1; echo "flashcore-candle GPU tests rc=$?" | tee -a $R
  grep -E "^test |test result" $OUT/candle-tests.log | tail -40 | tee -a $R
fi
# The merged tree's runtime toolkit check (libloading, cudarc fallback-dynamic-loading): a forward
# verify through the decode kernel and the persistent path.
timeout 90 .carry/xtask verify --kernels persistent-hopper,tile64 --cases 150 > $OUT/verify-fwd.log 2>&1; echo "verify fwd rc=$?" | tee -a $R
grep -h "passed, " $OUT/verify-fwd.log | tail -3 | tee -a $R
