# Seventh run of session 9 (H100): the two ladder rows below the best peer in run5,
# (2,16,8192,64) and (4,16,2048,128) non-causal, under the Hopper plan's A/B switches (no code
# change: FLASHCORE_HOPPER_* environment overrides of the same binary, e845943's kernels), two
# passes, then the peers once for the same two shapes.
# Run from the repo root: bash docs/results/2026-11-26-session9-h100/run7/run7.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run7.txt; L=/tmp/logs7; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SHAPES="--shape 2,16,8192,64 --shape 4,16,2048,128"
V=("default:" "stages3:FLASHCORE_HOPPER_STAGES=3" "stages4:FLASHCORE_HOPPER_STAGES=4" "headmajor0:FLASHCORE_HOPPER_HEAD_MAJOR=0"
   "dynamic0:FLASHCORE_HOPPER_DYNAMIC=0" "pingpong0:FLASHCORE_HOPPER_PINGPONG=0" "bn176:FLASHCORE_HOPPER_BLOCK_N=176"
   "wide0:FLASHCORE_HOPPER_WIDE_NONCAUSAL=0" "wide0-q1-s3:FLASHCORE_HOPPER_WIDE_NONCAUSAL=0 FLASHCORE_HOPPER_Q_STAGES=1 FLASHCORE_HOPPER_STAGES=3")
for i in 1 2; do for v in "${V[@]}"; do n=${v%%:*}; e=${v#*:}
  env $e timeout 60 $X bench-all --kernels persistent-hopper $SHAPES --causal off --dtypes f16 --no-peers --out-dir /tmp/b7-$n-$i > $L/$n-$i.log 2>&1
  echo "$n pass $i: $(grep -E '^\| [0-9,]+ \| f16 \| no \| persistent-hopper' /tmp/b7-$n-$i/bench-all.md | cut -d'|' -f2,7 | tr '\n' ' ') $(grep -ohE 'Unsupported[^|]{0,80}' /tmp/b7-$n-$i/bench-all.md | head -1)" | tee -a $R
done; done
timeout 120 $X bench-all --kernels persistent-hopper $SHAPES --causal off --dtypes f16 --out-dir /tmp/b7-peers > $L/peers.log 2>&1; echo "peers rc=$?" | tee -a $R
grep -E "^\| [0-9,]+ \| f16 \| no \| " /tmp/b7-peers/bench-all.md | grep -v "anchor\|efficient\|math" | cut -d'|' -f2,5,7 | tee -a $R
cp /tmp/b7-peers/bench-all.md $L/peers-bench-all.md
cd /tmp && tar cJf $OUT/logs.tar.xz logs7
