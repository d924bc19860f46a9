# Tenth run of session 8 (H100): is the causal mission row's extra time the schedule's order? The
# causal order puts 8 heads in an L2 section (g = 8), the non-causal one 1. Mission problem, graph
# replay, no peers, alternated three times: 55beae5 (.carry/xtask-prev); f32 schedule (.carry/xtask-fg,
# run9's candidate), non-causal also with FLASHCORE_HOPPER_HEAD_MAJOR=0 (g = 8 there too); and the
# candidate (.carry/xtask): g = 1 whenever every CTA gets at most one item. verify 400 after.
# Run from the repo root: bash docs/results/2026-11-26-session8-h100/run10/run10.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; R=$OUT/run10.txt; L=/tmp/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
m() { # label binary [env]
  env $3 timeout 60 .carry/$2 bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir /tmp/m-$1 > $L/mission-$1.log 2>&1
  echo "$1: $(grep -E '^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph' /tmp/m-$1/bench-all.md | cut -d'|' -f4,7 | tr '\n' ' ')" | tee -a $R
}
for i in 1 2 3; do
  m prev-$i xtask-prev; m fg-$i xtask-fg; m fg-g8-$i xtask-fg FLASHCORE_HOPPER_HEAD_MAJOR=0; m new-$i xtask
done
timeout 150 .carry/xtask verify --kernels persistent-hopper --cases 400 --seed 911 > $L/verify.log 2>&1; echo "verify rc=$?" | tee -a $R
grep -E "passed, " $L/verify.log | tail -1 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs
