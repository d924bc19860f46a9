# Fourth run: the committed Hopper backward (6730eb0: 7dafcd8's kernel, with the ring depth and the L2
# section size as build options, defaults unchanged). Side by side: verify --pass bwd --cases
# 1000, reliability --only backward, sanitize --pass bwd, and the candle GPU tests (their
# backward and training-step tests now take the Hopper backward on the H100). Then the
# committed backward bench with the portable backward and the peers, and an A/B of a 3-stage
# Q/dO ring (FLASHCORE_HOPPER_BWD_STAGES=3) without peers.
# Needs .carry/xtask and .carry/candle-bins.tar.xz (docs/results/2026-11-25-session4-h100/README.md).
# Run from the repo root: bash docs/results/2026-11-25-session5-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run4.txt; mkdir -p /tmp/v /tmp/cb
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
tar xJf .carry/candle-bins.tar.xz -C /tmp/cb
NV=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])")
(timeout 310 $X verify --pass bwd --kernels persistent-hopper --cases 1000 --seed 541 > $OUT/verify-bwd.log 2>&1; echo "verify rc=$?" >> /tmp/v/rc.txt) &
(timeout 310 $X reliability --only backward --kernels persistent-hopper --json $OUT/rel-bwd.json > $OUT/rel-bwd.log 2>&1; echo "reliability rc=$?" >> /tmp/v/rc.txt) &
(timeout 310 $X sanitize --pass bwd --kernels persistent-hopper --logs /tmp/sanlogs > $OUT/sanitize-bwd.log 2>&1; echo "sanitize rc=$?" >> /tmp/v/rc.txt) &
(export LD_LIBRARY_PATH=$(find $NV -name "lib*.so*" -printf "%h\n" | sort -u | tr '\n' ':')$LD_LIBRARY_PATH; timeout 200 /tmp/cb/candle-gpu --test-threads 2 > $OUT/candle-gpu-tests.log 2>&1; echo "candle gpu tests rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
tail -1 $OUT/verify-bwd.log | tee -a $R
grep -h -A6 "FAIL\|shrunk" $OUT/verify-bwd.log | head -16 | tee -a $R
grep -E "^reliability:|^sanitize:|^\| persistent-hopper \(bwd\)" $OUT/rel-bwd.log $OUT/sanitize-bwd.log | tee -a $R
grep -E "test result" $OUT/candle-gpu-tests.log | tee -a $R
timeout 150 $X bench-all --pass bwd --kernels persistent-hopper,persistent-portable --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --causal both --dtypes f16 --anchors .carry/anchors --out-dir /tmp/bb > $OUT/bench-bwd.log 2>&1; echo "bench bwd rc=$?" | tee -a $R
cp /tmp/bb/bench-bwd.md $OUT/ 2>/dev/null
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| [a-z0-9_-]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+×" $OUT/bench-bwd.log | cut -d'|' -f2-9 | tee -a $R
for S in 3 2; do
  FLASHCORE_HOPPER_BWD_STAGES=$S timeout 60 $X bench-all --pass bwd --kernels persistent-hopper --shape 4,16,2048,64 --shape 4,16,2048,128 --shape 1,16,16384,128 --shape 8,32,4096,128 --causal both --dtypes f16 --no-peers --out-dir /tmp/ab > /tmp/ab.log 2>&1; echo "stages $S rc=$?" | tee -a $R
  grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| persistent-hopper \|" /tmp/ab.log | head -8 | cut -d'|' -f2-7 | tee -a $R
done
