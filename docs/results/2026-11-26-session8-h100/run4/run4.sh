# Fourth run of session 8 (asks for the H100: runs 1-3 came on an H200): the candidate tree.
# page_row (a multiply-high for the division by the block size, every kernel's paged loads),
# tile64 reading a one-page tile's block-table entry a tile ahead, the Hopper plan's group count
# by a shift, the dense Hopper LSE offset without cu_seqlens_q; the cp.async Hopper producer of
# run3 is taken back out (slower than TMA at every block size).
# verify --cases 1000 on Hopper, portable and tile64 and the decode path with forced split counts,
# side by side; then the paged suite (no peers) on the three kernels.
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run4.txt; L=/tmp/logs; mkdir -p $L /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
for k in persistent-hopper persistent-portable tile64; do
  (timeout 300 $X verify --kernels $k --cases 1000 --seed 871 > $L/verify-$k.log 2>&1; echo "verify $k rc=$?" >> /tmp/v/rc.txt) &
done
(FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 300 $X verify --kernels persistent-hopper,persistent-portable --cases 400 --seed 872 > $L/verify-decode-sweep.log 2>&1; echo "verify decode sweep rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
for f in $L/verify-*.log; do echo "$(basename $f): $(grep -h 'passed, ' $f | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" $f | head -8 | tee -a $R; done
timeout 200 $X bench-all --suite paged --kernels persistent-hopper,persistent-portable,tile64 --no-peers --out-dir /tmp/p > $L/paged.log 2>&1; echo "paged rc=$?" | tee -a $R
cp /tmp/p/bench-paged.md $L/paged.md
grep -E "time / contiguous time" /tmp/p/bench-paged.md | cut -d"|" -f2-4 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs
