# First run of the Hopper backward (kernels/gen5_hopper_bwd.cu): verify --pass bwd with bounded
# mbarrier waits (a protocol bug traps instead of hanging), then the full sweep, then the
# backward bench beside the portable backward and the peers.
# Run from the repo root: bash docs/results/2026-11-25-session5-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run1.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
FLASHCORE_HOPPER_DEBUG=1 timeout 150 $X verify --pass bwd --kernels persistent-hopper --cases 100 --seed 501 > $OUT/verify-bwd-debug.log 2>&1; echo "verify debug rc=$?" | tee -a $R
tail -3 $OUT/verify-bwd-debug.log | tee -a $R
grep -h -B2 -A6 "FAIL\|shrunk\|stuck" $OUT/verify-bwd-debug.log | head -30 | tee -a $R
timeout 200 $X verify --pass bwd --kernels persistent-hopper --cases 1000 --seed 502 > $OUT/verify-bwd.log 2>&1; echo "verify rc=$?" | tee -a $R
tail -2 $OUT/verify-bwd.log | tee -a $R
timeout 180 $X bench-all --pass bwd --kernels persistent-hopper,persistent-portable --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb > $OUT/bench-bwd.log 2>&1; echo "bench bwd rc=$?" | tee -a $R
cp /tmp/bb/*.md $OUT/ 2>/dev/null
grep -E "^\| [0-9,]+ " $OUT/bench-bwd.log | head -40 | tee -a $R
