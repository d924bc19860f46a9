# Third run of session 9 (H100): the spread producer as a build of its own (FC_HOPPER_SPREAD_PAGES,
# set by the plan when a paged tile's boxes hold < 64 rows); every other build's PTX is that of
# 7986516 (check-kernels --compare-ptx), so runs 1-2's slower chunked prefill on 64/256-row pages
# should be gone. Same protocol fixes as run1.
# 1. verify with FLASHCORE_HOPPER_DEBUG=1; 2. verify --cases 1000, reliability --only modes and
# sanitize (Hopper) side by side; 3. paged suite against 7986516 (.carry/xtask-final), alternated
# three times; varlen suite.
# Run from the repo root: bash docs/results/2026-11-26-session9-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run3.txt; L=/tmp/logs3; mkdir -p $L /tmp/v3
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
SECONDS=0
FLASHCORE_HOPPER_DEBUG=1 timeout 120 $X verify --kernels persistent-hopper --cases 150 --seed 9301 > $L/verify-debug.log 2>&1
echo "verify debug rc=$? (${SECONDS}s): $(grep -h 'passed, ' $L/verify-debug.log | tail -1)" | tee -a $R
grep -h -B2 -A5 "FAIL\|shrunk\|flashcore hopper" $L/verify-debug.log | head -12 | tee -a $R
SECONDS=0
(timeout 260 $X verify --kernels persistent-hopper --cases 1000 --seed 9302 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v3/rc.txt) &
(timeout 200 $X reliability --only modes --kernels persistent-hopper > $L/reliability-modes.log 2>&1; echo "reliability modes rc=$?" >> /tmp/v3/rc.txt) &
(timeout 260 $X sanitize --kernels persistent-hopper --logs /tmp/san3 > $L/sanitize-hopper.log 2>&1; echo "sanitize hopper rc=$?" >> /tmp/v3/rc.txt) &
wait
sort /tmp/v3/rc.txt | tee -a $R
echo "verify: $(grep -h 'passed, ' $L/verify.log | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" $L/verify.log | head -8 | tee -a $R
grep -E "^modes" $L/reliability-modes.log | cut -c1-70 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-hopper.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
for i in 1 2 3; do for b in xtask-final xtask; do
  timeout 60 .carry/$b bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/p3-$b-$i > $L/paged-$b-$i.log 2>&1
  cp /tmp/p3-$b-$i/bench-paged.md $L/paged-$b-$i.md
  echo "paged $b $i: $(grep -E 'time / contiguous time' /tmp/p3-$b-$i/bench-paged.md | cut -d'|' -f2,4 | tr '\n' ' ' | sed 's/paged block //g; s/ time \/ contiguous time//g')" | tee -a $R
  echo "   µs: $(grep -E '^\| (decode|chunk|prefill)/(contig|paged-[0-9]+) \| persistent-hopper' /tmp/p3-$b-$i/bench-paged.md | cut -d'|' -f2,5 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
done; done
timeout 60 $X bench-all --suite varlen --kernels persistent-hopper --no-peers --out-dir /tmp/b3-varlen > $L/bench-varlen.log 2>&1; echo "varlen rc=$?" | tee -a $R
cp /tmp/b3-varlen/bench-varlen.md $L/; grep -E "^\| varlen TFLOP" /tmp/b3-varlen/bench-varlen.md | cut -d"|" -f3-4 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs3
