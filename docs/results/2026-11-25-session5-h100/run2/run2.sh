# Second run of the Hopper backward: units in L2 sections (one wave of units over a few heads),
# Pᵀ and dV issued while dPᵀ runs, the mask as a separate pass. A short debug verify first; then
# verify --cases 1000, reliability --only backward and sanitize --pass bwd side by side; then the
# backward bench with the peers, and one ncu profile of the main kernel.
# Run from the repo root: bash docs/results/2026-11-25-session5-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run2.txt; mkdir -p /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
FLASHCORE_HOPPER_DEBUG=1 timeout 100 $X verify --pass bwd --kernels persistent-hopper --cases 60 --seed 511 > $OUT/verify-bwd-debug.log 2>&1; rc=$?; echo "verify debug rc=$rc" | tee -a $R
tail -2 $OUT/verify-bwd-debug.log | tee -a $R
if [ $rc = 0 ]; then
  (timeout 320 $X verify --pass bwd --kernels persistent-hopper --cases 1000 --seed 512 > $OUT/verify-bwd.log 2>&1; echo "verify rc=$?" >> /tmp/v/rc.txt) &
  (timeout 320 $X reliability --only backward --kernels persistent-hopper --json $OUT/rel-bwd.json > $OUT/rel-bwd.log 2>&1; echo "reliability rc=$?" >> /tmp/v/rc.txt) &
  (timeout 320 $X sanitize --pass bwd --kernels persistent-hopper --logs /tmp/sanlogs > $OUT/sanitize-bwd.log 2>&1; echo "sanitize rc=$?" >> /tmp/v/rc.txt) &
  wait
  sort /tmp/v/rc.txt | tee -a $R
  tail -2 $OUT/verify-bwd.log | tee -a $R
  grep -h -A6 "FAIL\|shrunk" $OUT/verify-bwd.log | head -20 | tee -a $R
  tail -12 $OUT/rel-bwd.log | tee -a $R
  tail -8 $OUT/sanitize-bwd.log | tee -a $R
fi
timeout 150 $X bench-all --pass bwd --kernels persistent-hopper --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb > $OUT/bench-bwd.log 2>&1; echo "bench bwd rc=$?" | tee -a $R
cp /tmp/bb/bench-bwd.md $OUT/ 2>/dev/null
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \|" $OUT/bench-bwd.log | head -8 | tee -a $R
timeout 90 ncu -k regex:bwd_hopper_dk_dv -c 1 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis $X bench-all --pass bwd --kernels persistent-hopper --shape 1,16,16384,128 --causal off --dtypes f16 --no-peers --quick --out-dir /tmp/nb > $OUT/ncu.log 2>&1; echo "ncu rc=$?" | tee -a $R
grep -E "Duration|Throughput|Executed Ipc|Issue Slots|Stall|Hit Rate|Pipe" $OUT/ncu.log | head -40 | tee -a $R
