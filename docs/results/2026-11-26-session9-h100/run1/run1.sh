# First run of session 9 (H100): Hopper paged tiles on small pages issued by all four producer
# warps (kv_spread, producer_spread.cuh), with session 8's zero-tail fix and two more protocol
# fixes (a follower warp waits only on slots it fills; with the dynamic schedule it arrives on the
# Q buffer's "empty" barrier once it read the unit). Modes build only; dense builds' PTX reordered only.
# 1. verify with FLASHCORE_HOPPER_DEBUG=1 (bounded waits: a protocol deadlock traps and says where);
# 2. verify --cases 1000, reliability --only modes and sanitize (Hopper) side by side;
# 3. paged suite (Hopper) against 7986516 (.carry/xtask-final), alternated twice; varlen suite;
# 4. tile64's suspected contiguous regression: varlen dense-eq and paged prefill/contig, this tree
#    against 13cf0d5 (.carry/xtask-13cf), alternated twice.
# Run from the repo root: bash docs/results/2026-11-26-session9-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run1.txt; L=/tmp/logs; mkdir -p $L /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
SECONDS=0
FLASHCORE_HOPPER_DEBUG=1 timeout 120 $X verify --kernels persistent-hopper --cases 150 --seed 9101 > $L/verify-debug.log 2>&1
echo "verify debug rc=$? (${SECONDS}s): $(grep -h 'passed, ' $L/verify-debug.log | tail -1)" | tee -a $R
grep -h -B2 -A5 "FAIL\|shrunk\|flashcore hopper" $L/verify-debug.log | head -12 | tee -a $R
SECONDS=0
(timeout 260 $X verify --kernels persistent-hopper --cases 1000 --seed 9102 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v/rc.txt) &
(timeout 200 $X reliability --only modes --kernels persistent-hopper > $L/reliability-modes.log 2>&1; echo "reliability modes rc=$?" >> /tmp/v/rc.txt) &
(timeout 260 $X sanitize --kernels persistent-hopper --logs /tmp/san1 > $L/sanitize-hopper.log 2>&1; echo "sanitize hopper rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
echo "verify: $(grep -h 'passed, ' $L/verify.log | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" $L/verify.log | head -8 | tee -a $R
grep -E "^modes" $L/reliability-modes.log | cut -c1-70 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-hopper.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
for i in 1 2; do for b in xtask-final xtask; do
  timeout 60 .carry/$b bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/p-$b-$i > $L/paged-$b-$i.log 2>&1
  cp /tmp/p-$b-$i/bench-paged.md $L/paged-$b-$i.md
  echo "paged $b $i: $(grep -E 'time / contiguous time' /tmp/p-$b-$i/bench-paged.md | cut -d'|' -f2,4 | tr '\n' ' ' | sed 's/paged block //g; s/ time \/ contiguous time//g')" | tee -a $R
done; done
timeout 60 $X bench-all --suite varlen --kernels persistent-hopper --no-peers --out-dir /tmp/b-varlen > $L/bench-varlen.log 2>&1; echo "varlen rc=$?" | tee -a $R
cp /tmp/b-varlen/bench-varlen.md $L/; grep -E "^\| varlen TFLOP" /tmp/b-varlen/bench-varlen.md | cut -d"|" -f3-4 | tee -a $R
for i in 1 2; do for b in xtask-13cf xtask; do
  timeout 40 .carry/$b bench-all --suite varlen --case dense-eq --kernels tile64 --no-peers --out-dir /tmp/t-$b-$i > $L/t64-eq-$b-$i.log 2>&1
  timeout 40 .carry/$b bench-all --suite paged --case prefill/contig --kernels tile64 --no-peers --out-dir /tmp/t-$b-$i > $L/t64-pf-$b-$i.log 2>&1
  cp /tmp/t-$b-$i/bench-*.md $L/ 2>/dev/null; for f in /tmp/t-$b-$i/bench-*.md; do cp $f $L/t64-$b-$i-$(basename $f); done
  echo "tile64 $b $i: $(grep -hE '^\| (dense-eq|prefill/contig) \| tile64' /tmp/t-$b-$i/bench-*.md | cut -d'|' -f2,5 | tr '\n' ' ')" | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
