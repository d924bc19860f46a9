# Eighteenth run of session 8 (H100): Hopper paged tiles on small pages issued by all four producer
# warps (kv_spread, producer_spread.cuh; modes build only, the dense builds' PTX unchanged).
# verify --cases 1000, reliability --only modes and sanitize (Hopper) side by side; then the paged
# suite (Hopper) against b7b5254 (.carry/xtask-final), alternated twice; the varlen suite.
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run18/run18.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run18.txt; L=/tmp/logs; mkdir -p $L /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
(timeout 240 $X verify --kernels persistent-hopper --cases 1000 --seed 981 > $L/verify.log 2>&1; echo "verify rc=$?" >> /tmp/v/rc.txt) &
(timeout 200 $X reliability --only modes --kernels persistent-hopper > $L/reliability-modes.log 2>&1; echo "reliability modes rc=$?" >> /tmp/v/rc.txt) &
(timeout 240 $X sanitize --kernels persistent-hopper --logs /tmp/san1 > $L/sanitize-hopper.log 2>&1; echo "sanitize hopper rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
echo "verify: $(grep -h 'passed, ' $L/verify.log | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" $L/verify.log | head -8 | tee -a $R
grep -E "^modes" $L/reliability-modes.log | cut -c1-70 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-hopper.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
for i in 1 2; do for b in xtask-final xtask; do
  timeout 90 .carry/$b bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/p-$b-$i > $L/paged-$b-$i.log 2>&1
  cp /tmp/p-$b-$i/bench-paged.md $L/paged-$b-$i.md
  echo "paged $b $i: $(grep -E 'time / contiguous time' /tmp/p-$b-$i/bench-paged.md | cut -d'|' -f2,4 | tr '\n' ' ' | sed 's/paged block //g; s/ time \/ contiguous time//g')" | tee -a $R
done; done
timeout 60 $X bench-all --suite varlen --kernels persistent-hopper --no-peers --out-dir /tmp/b-varlen > $L/bench-varlen.log 2>&1; echo "varlen rc=$?" | tee -a $R
cp /tmp/b-varlen/bench-varlen.md $L/; grep -E "^\| varlen TFLOP" /tmp/b-varlen/bench-varlen.md | cut -d"|" -f3-4 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs
