# Tenth device run: the Hopper dense build tests only the right bound of a masked tile again (a
# window's left edge only in the modes build). Same-run A/B of the mission shape against the
# release xtask of 3d690b3 (before the modes, .carry/xtask-old), alternated 3 times; verify
# --cases 1000 on the Hopper path; then the ladder beside the peers.
# Run from the repo root: bash docs/results/2026-11-25-modes-h100/run10/run10.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run10.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for i in 1 2 3; do for b in xtask-old xtask; do
  timeout 60 .carry/$b bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir /tmp/m-$b-$i > /tmp/m-$b-$i.log 2>&1
  echo "mission A/B $b try $i: $(grep -E '^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph' /tmp/m-$b-$i/bench-all.md | cut -d'|' -f4,7 | tr '\n' ' ')" | tee -a $R
done; done
timeout 240 $X verify --kernels persistent-hopper --cases 1000 > $OUT/verify-persistent-hopper.log 2>&1; echo "persistent-hopper verify rc=$?" | tee -a $R
grep -h "passed, " $OUT/verify-persistent-hopper.log | tee -a $R
timeout 200 $X bench-all --suite ladder --kernels persistent-hopper --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir /tmp/ladder > $OUT/bench-ladder.log 2>&1; echo "bench ladder rc=$?" | tee -a $R
cp /tmp/ladder/bench-all.md $OUT/ladder-bench-all.md
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| (persistent-hopper|sdpa_cudnn) \|" /tmp/ladder/bench-all.md | cut -d'|' -f2-8 | tee -a $R
