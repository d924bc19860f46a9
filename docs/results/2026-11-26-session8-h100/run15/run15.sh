# Fifteenth run of session 8 (H100), the final binary: its dense Hopper builds are run11's PTX and
# its modes builds run14's (check-kernels --compare-ptx), so run11/run12 (verify, reliability,
# sanitize, ladder) and run14 (verify, reliability, sanitize, paged) cover it; this run times it
# once more: the mission problem against 55beae5 (.carry/xtask-prev), alternated twice; the ladder
# beside the peers; the paged suite (Hopper), two passes.
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run15/run15.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; R=$OUT/run15.txt; L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
X=.carry/xtask
for i in 1 2; do for b in xtask-prev xtask; do
  timeout 60 .carry/$b bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir /tmp/m-$b-$i > $L/mission-$b-$i.log 2>&1
  echo "mission $b $i: $(grep -E '^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph' /tmp/m-$b-$i/bench-all.md | cut -d'|' -f4,7 | tr '\n' ' ')" | tee -a $R
done; done
timeout 150 $X bench-all --suite ladder --kernels persistent-hopper --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir /tmp/ladder > $L/bench-ladder.log 2>&1; echo "bench ladder rc=$?" | tee -a $R
cp /tmp/ladder/bench-all.md $L/ladder-bench-all.md
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| (persistent-hopper|sdpa_cudnn) \| (graph|eager)" /tmp/ladder/bench-all.md | cut -d'|' -f2-8 | tee -a $R
for i in 1 2; do
  timeout 90 $X bench-all --suite paged --kernels persistent-hopper --no-peers --out-dir /tmp/p-$i > $L/paged-$i.log 2>&1
  cp /tmp/p-$i/bench-paged.md $L/paged-$i.md
  echo "paged $i: $(grep -E 'time / contiguous time' /tmp/p-$i/bench-paged.md | cut -d'|' -f2,4 | tr '\n' ' ' | sed 's/paged block //g; s/ time \/ contiguous time//g')" | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs
