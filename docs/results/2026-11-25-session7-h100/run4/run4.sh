# Fourth run, the candidate tree: run3's kernels without the Hopper one-tile-ahead page read
# (it made Hopper paged 4-5 % slower; reverted), and load_tile_groups_async (portable, tile64,
# decode) looking up one 16-row group per lane and sharing the addresses by shuffle.
# verify --cases 1000 on Hopper, portable and tile64 and the decode path with forced split
# counts, side by side; then the varlen and paged suites on the three kernels (no peers: both
# suites compare flashcore with flashcore), with .carry/xtask-base (35a42ee) beside them.
# Run from the repo root: bash docs/results/2026-11-25-session7-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run4.txt; L=/tmp/logs; mkdir -p $L /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
for k in persistent-hopper persistent-portable tile64; do
  (timeout 300 $X verify --kernels $k --cases 1000 --seed 741 > $L/verify-$k.log 2>&1; echo "verify $k rc=$?" >> /tmp/v/rc.txt) &
done
(FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 300 $X verify --kernels persistent-hopper,persistent-portable --cases 400 --seed 742 > $L/verify-decode-sweep.log 2>&1; echo "verify decode sweep rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
for f in $L/verify-*.log; do echo "$(basename $f): $(grep -h 'passed, ' $f | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" $f | head -8 | tee -a $R; done
for b in xtask xtask-base; do
  timeout 100 .carry/$b bench-all --suite varlen --kernels persistent-hopper,persistent-portable,tile64 --no-peers --out-dir /tmp/v-$b > $L/varlen-$b.log 2>&1; echo "varlen $b rc=$?" | tee -a $R
  cp /tmp/v-$b/bench-varlen.md $L/varlen-$b.md
  grep -E "^\| varlen (TFLOP|with every)" /tmp/v-$b/bench-varlen.md | cut -d"|" -f3-4 | tee -a $R
done
for b in xtask xtask-base; do
  timeout 150 .carry/$b bench-all --suite paged --kernels persistent-hopper,persistent-portable,tile64 --no-peers --out-dir /tmp/p-$b > $L/paged-$b.log 2>&1; echo "paged $b rc=$?" | tee -a $R
  cp /tmp/p-$b/bench-paged.md $L/paged-$b.md
  grep -E "time / contiguous time" /tmp/p-$b/bench-paged.md | cut -d"|" -f2-4 | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
