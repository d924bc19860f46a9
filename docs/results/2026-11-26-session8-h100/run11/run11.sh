# Eleventh run of session 8 (H100), the candidate for the mission rows: the schedule's g in f32
# (run9), g = 1 whenever every CTA gets at most one item (run10), decode's one-division form for
# g = 1, and the producer's first static unit decoded while thread 32 sets the barriers up.
# Mission problem against 55beae5 (.carry/xtask-prev), graph replay, no peers, alternated three
# times; the ladder beside the peers (`--anchors .carry/anchors`); verify --cases 1000 (Hopper).
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run11/run11.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; R=$OUT/run11.txt; L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for i in 1 2 3; do for b in xtask-prev xtask; do
  timeout 60 .carry/$b bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir /tmp/m-$b-$i > $L/mission-$b-$i.log 2>&1
  echo "$b $i: $(grep -E '^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph' /tmp/m-$b-$i/bench-all.md | cut -d'|' -f4,7 | tr '\n' ' ')" | tee -a $R
done; done
timeout 300 .carry/xtask bench-all --suite ladder --kernels persistent-hopper --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir /tmp/ladder > $L/bench-ladder.log 2>&1; echo "bench ladder rc=$?" | tee -a $R
cp /tmp/ladder/bench-all.md $L/ladder-bench-all.md
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| (persistent-hopper|sdpa_cudnn) \| (graph|eager)" /tmp/ladder/bench-all.md | cut -d'|' -f2-8 | tee -a $R
timeout 220 .carry/xtask verify --kernels persistent-hopper --cases 1000 --seed 921 > $L/verify.log 2>&1; echo "verify rc=$?" | tee -a $R
grep -E "passed, " $L/verify.log | tail -1 | tee -a $R; grep -h -A5 "FAIL\|shrunk" $L/verify.log | head -8 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs
