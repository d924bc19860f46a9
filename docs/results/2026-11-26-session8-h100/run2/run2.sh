# Second run of session 8, the candidate tree: (a) page_row, a multiply-high in place of the
# division by the block size (every kernel's paged loads); (b) Hopper paged tiles with page groups
# under 64 rows copied by the producer warp with cp.async (swizzled like TMA, 32 arrivals on
# "full", the consumers fence the async proxy) instead of one TMA box per 16-row group;
# (c) the dense Hopper build's LSE offset without the cu_seqlens_q test.
# verify --cases 1000 on Hopper, portable and tile64 and the decode path with forced split counts,
# side by side; then the paged suite (no peers: paged against contiguous, same run) on Hopper and
# tile64, and Hopper again with FLASHCORE_HOPPER_PAGED_CP_ASYNC_ROWS=128 (block 64 by cp.async too).
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run2.txt; L=/tmp/logs; mkdir -p $L /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
for k in persistent-hopper persistent-portable tile64; do
  (timeout 290 $X verify --kernels $k --cases 1000 --seed 851 > $L/verify-$k.log 2>&1; echo "verify $k rc=$?" >> /tmp/v/rc.txt) &
done
(FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 290 $X verify --kernels persistent-hopper,persistent-portable --cases 400 --seed 852 > $L/verify-decode-sweep.log 2>&1; echo "verify decode sweep rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
for f in $L/verify-*.log; do echo "$(basename $f): $(grep -h 'passed, ' $f | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" $f | head -8 | tee -a $R; done
paged() { # name kernels [env]
  env $3 timeout 100 $X bench-all --suite paged --kernels $2 --no-peers --out-dir /tmp/p-$1 > $L/paged-$1.log 2>&1; echo "paged $1 rc=$?" | tee -a $R
  cp /tmp/p-$1/bench-paged.md $L/paged-$1.md
  grep -E "time / contiguous time" /tmp/p-$1/bench-paged.md | cut -d"|" -f2-4 | tee -a $R
}
paged hopper persistent-hopper
paged tile64 tile64
paged hopper-cp128 persistent-hopper FLASHCORE_HOPPER_PAGED_CP_ASYNC_ROWS=128
cd /tmp && tar cJf $OUT/logs.tar.xz logs
