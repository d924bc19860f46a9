# Fourteenth run of session 8 (H100), the final tree: run11's dense-build schedule with the modes
# build's schedule arithmetic as in 55beae5 (run13 saw paged chunk at blocks 64/256 4-5 % slower
# with run11's in both builds). verify --cases 1000, reliability --only modes and sanitize on the
# Hopper path, side by side; the mission problem against 55beae5 (.carry/xtask-prev), alternated
# twice; the ladder beside the peers; the paged suite (Hopper) against 55beae5, alternated twice.
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run14/run14.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; R=$OUT/run14.txt; L=/tmp/logs; mkdir -p $L /tmp/v
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
(timeout 240 $X verify --kernels persistent-hopper --cases 1000 --seed 941 > $L/verify.log 2>&1; echo "verify rc=$?" >> /tmp/v/rc.txt) &
(timeout 200 $X reliability --only modes --kernels persistent-hopper > $L/reliability-modes.log 2>&1; echo "reliability modes rc=$?" >> /tmp/v/rc.txt) &
(timeout 240 $X sanitize --kernels persistent-hopper --logs /tmp/san1 > $L/sanitize-hopper.log 2>&1; echo "sanitize hopper rc=$?" >> /tmp/v/rc.txt) &
wait
sort /tmp/v/rc.txt | tee -a $R
echo "verify: $(grep -h 'passed, ' $L/verify.log | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" $L/verify.log | head -8 | tee -a $R
grep -E "^modes" $L/reliability-modes.log | cut -c1-70 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-hopper.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
for i in 1 2; do for b in xtask-prev xtask; do
  timeout 60 .carry/$b bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir /tmp/m-$b-$i > $L/mission-$b-$i.log 2>&1
  echo "mission $b $i: $(grep -E '^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph' /tmp/m-$b-$i/bench-all.md | cut -d'|' -f4,7 | tr '\n' ' ')" | tee -a $R
done; done
timeout 150 $X bench-all --suite ladder --kernels persistent-hopper --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir /tmp/ladder > $L/bench-ladder.log 2>&1; echo "bench ladder rc=$?" | tee -a $R
cp /tmp/ladder/bench-all.md $L/ladder-bench-all.md
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| (persistent-hopper|sdpa_cudnn) \| (graph|eager)" /tmp/ladder/bench-all.md | cut -d'|' -f2-8 | tee -a $R
for i in 1 2; do for b in xtask-prev xtask; do
  timeout 90 .carry/$b bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/p-$b-$i > $L/paged-$b-$i.log 2>&1
  cp /tmp/p-$b-$i/bench-paged.md $L/paged-$b-$i.md
  echo "paged $b $i: $(grep -E 'time / contiguous time' /tmp/p-$b-$i/bench-paged.md | cut -d'|' -f2,4 | tr '\n' ' ' | sed 's/paged block //g; s/ time \/ contiguous time//g')" | tee -a $R
done; done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
