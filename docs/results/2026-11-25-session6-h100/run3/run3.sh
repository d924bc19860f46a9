# Third run: key_range in 32-bit arithmetic (seqlen.cuh, every kernel's modes build and decode)
# and the Hopper modes consumer taking its warpgroup's unmasked key bounds from the item's start
# (consumer_math.cuh), from run2's SASS diff; the Hopper producer reads a paged tile's pages
# before it waits for the tile's slots (kv_fetch.cuh). Side by side: verify --cases 1000 on the four
# modes kernels, and the decode path with forced split counts; then the varlen suite on both
# persistent paths and the paged suite on Hopper (ratios within the same run).
# Run from the repo root: bash docs/results/2026-11-25-session6-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run3.txt; mkdir -p /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for k in persistent-hopper persistent-portable tile64 scalar; do
  (timeout 330 $X verify --kernels $k --cases 1000 --seed 631 > $OUT/verify-$k.log 2>&1; echo "verify $k rc=$?" >> /tmp/v/rc.txt) &
done
(FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 330 $X verify --kernels persistent-hopper --cases 400 --seed 632 > $OUT/verify-decode-sweep.log 2>&1; echo "verify decode sweep rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
for f in $OUT/verify-*.log; do echo "$(basename $f): $(grep -h 'passed, ' $f | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" $f | head -8 | tee -a $R; done
timeout 150 $X bench-all --suite varlen --kernels persistent-hopper,persistent-portable --no-peers --out-dir /tmp/varlen > $OUT/bench-varlen.log 2>&1; echo "varlen bench rc=$?" | tee -a $R
cp /tmp/varlen/bench-varlen.md $OUT/ 2>/dev/null
grep -E "^\| varlen (TFLOP|with every)" /tmp/varlen/bench-varlen.md | cut -d"|" -f2-5 | tee -a $R
timeout 120 $X bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/paged > $OUT/bench-paged.log 2>&1; echo "paged bench rc=$?" | tee -a $R
cp /tmp/paged/bench-paged.md $OUT/ 2>/dev/null
grep -E "time / contiguous time" /tmp/paged/bench-paged.md | cut -d"|" -f2-6 | tee -a $R
