# Seventh run of session 4, after two refactors of already-verified code: flashcore-candle's
# forward and backward ops share one forward helper, and the portable backward's row-wise
# kernels share one flat-row decoder. The candle GPU tests again, and verify --pass bwd for both
# portable schedules (fresh seeds), side by side.
# Run from the repo root: bash docs/results/2026-11-25-session4-h100/run7/run7.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run7.txt; mkdir -p /tmp/v /tmp/cb
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
tar xJf .carry/candle-bins.tar.xz -C /tmp/cb
NV=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])")
export LD_LIBRARY_PATH=$(find $NV -name "lib*.so*" -printf "%h\n" | sort -u | tr '\n' ':')$LD_LIBRARY_PATH
for k in persistent-portable persistent-portable-atomic; do
  (timeout 150 $X verify --pass bwd --kernels $k --cases 500 --seed 71 > $OUT/verify-bwd-$k.log 2>&1; echo "verify $k rc=$?" >> /tmp/v/rc.txt) &
done
(timeout 150 /tmp/cb/candle-gpu --test-threads 2 > $OUT/candle-gpu-tests.log 2>&1; echo "candle gpu tests rc=$?" >> /tmp/v/rc.txt)
wait
sort /tmp/v/rc.txt | tee -a $R
grep -E "^test |test result" $OUT/candle-gpu-tests.log | tee -a $R
for k in persistent-portable persistent-portable-atomic; do echo "$k: $(grep -h 'passed, ' $OUT/verify-bwd-$k.log | tail -1)" | tee -a $R; done
grep -h -A4 "FAIL\|shrunk" $OUT/verify-bwd-*.log | head -12 | tee -a $R
