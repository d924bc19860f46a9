# Third run. Kernel changes since 35a42ee, from run1/run2's profiles:
#  - Hopper modes consumer: a warpgroup with no rows in the item passes its key tiles (vote branch);
#    whether the problem has score modifiers is tested once per item, not per tile; a masked tile
#    whose rows have no lower bound inside it (no window edge) takes the one-sided mask.
#  - Hopper producer: a paged tile's page ids are read one tile ahead of its copies.
#  - Portable: one page lookup per lane for a paged tile (shared by shuffle), the warp's key tiles
#    and the modifier test once per item; mask_scores_range's one-sided fast path (also tile64 and
#    the decode kernel, which share it).
# verify --cases 1000 on Hopper, portable and tile64 and the decode path with forced split counts,
# side by side; then the varlen and paged suites (no peers) on both persistent paths, this tree
# against .carry/xtask-base (35a42ee), alternated.
# Run from the repo root: bash docs/results/2026-11-25-session7-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run3.txt; L=/tmp/logs; mkdir -p $L /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
for k in persistent-hopper persistent-portable tile64; do
  (timeout 300 $X verify --kernels $k --cases 1000 --seed 731 > $L/verify-$k.log 2>&1; echo "verify $k rc=$?" >> /tmp/v/rc.txt) &
done
(FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 300 $X verify --kernels persistent-hopper,persistent-portable --cases 400 --seed 732 > $L/verify-decode-sweep.log 2>&1; echo "verify decode sweep rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
for f in $L/verify-*.log; do echo "$(basename $f): $(grep -h 'passed, ' $f | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" $f | head -8 | tee -a $R; done
for i in 1 2; do for b in xtask-base xtask; do
  timeout 80 .carry/$b bench-all --suite varlen --kernels persistent-hopper,persistent-portable --no-peers --out-dir /tmp/v-$b-$i > $L/varlen-$b-$i.log 2>&1; echo "varlen $b $i rc=$?" | tee -a $R
  grep -E "^\| varlen (TFLOP|with every)" /tmp/v-$b-$i/bench-varlen.md | cut -d"|" -f3-4 | tee -a $R
done; done
for b in xtask-base xtask; do
  timeout 100 .carry/$b bench-all --suite paged --kernels persistent-hopper,persistent-portable --no-peers --out-dir /tmp/p-$b > $L/paged-$b.log 2>&1; echo "paged $b rc=$?" | tee -a $R
  cp /tmp/p-$b/bench-paged.md $L/paged-$b.md
  grep -E "time / contiguous time" /tmp/p-$b/bench-paged.md | cut -d"|" -f2-4 | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
