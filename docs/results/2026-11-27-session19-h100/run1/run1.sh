# First run of session 19 (H100). This tree adds the cluster key split (FC_HOPPER_CLUSTER_KEY_SPLIT):
# a cluster of two CTAs takes each 64-row item, CTA r the r-th half of its key tiles (its two
# warpgroups split those as in session 18), and the CTAs merge through each other's shared memory
# (st.async into the partner, counted off its mbarrier). Default where a cluster an item fits one
# round (the mission shape: 128 CTAs). FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT=0 gives session 18's
# build (its PTX unchanged, check-kernels --compare-ptx).
# (1) a quick forced verify of the new build (catches a hang or a wrong merge early);
# (2) the mission shape, alternating three times: cluster off against on;
# (3) the cluster build's timeline;
# (4) other shapes the rule takes, off against on;
# (5) only if the mission sum is lower with it: verify --cases 1000 default and forced, sanitize
#     default and forced, determinism forced, and the mission suite with peers.
# Run from the repo root: bash docs/results/2026-11-27-session19-h100/run1/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run1.txt; L=/tmp/logs1; mkdir -p $L /tmp/v1
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs1; cd - > /dev/null; }
FORCE="FLASHCORE_HOPPER_WG_KEY_SPLIT=1 FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT=1"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
env $FORCE timeout 200 $X verify --kernels persistent-hopper --cases 150 --seed 1901 > $L/quick.log 2>&1
echo "== quick verify forced: rc=$? $(grep -h 'passed, ' $L/quick.log | tail -1)" | tee -a $R
grep -h -B1 -A8 "FAIL\|shrunk\|error" $L/quick.log | head -30 | tee -a $R
m() {  # label, env...
  label=$1; shift
  env "$@" timeout 100 $X bench-all --suite mission --causal both --kernels persistent-hopper --no-peers --out-dir $L/m-$label > $L/m-$label.log 2>&1
  echo "== mission $label ($*): rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/m-$label/bench-all.md | cut -d'|' -f2-8 | tee -a $R | tee -a $L/sum-${label%-*}.txt
}
for round in 1 2 3; do
  m off-$round FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT=0
  m on-$round FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT=1
done
sum() { awk -F'|' '{s += $6} END {printf "%.2f", s}' $L/sum-$1.txt; }
echo "mission sums (6 rows each): off $(sum off), on $(sum on)" | tee -a $R
pack
FLASHCORE_HOPPER_TRACE=1 timeout 100 $X bench-all --shape 1,8,512,64 --causal off --kernels persistent-hopper --no-peers --repeats 3 --max-seconds-per-shape 1 --out-dir $L/trace > $L/trace.log 2>&1
echo "== trace mission (cluster): rc=$?" | tee -a $R
grep -h "fwd-trace" $L/trace.log | grep -v "tile [0-9]" | head -12 | tee -a $R
s() {  # shape, label, env...
  shape=$1; label=$2; shift 2
  env "$@" timeout 100 $X bench-all --shape $shape --causal both --kernels persistent-hopper --no-peers --out-dir $L/s-$shape-$label > $L/s-$shape-$label.log 2>&1
  echo "== $shape $label ($*): rc=$?" | tee -a $R
  grep -E "^\| $shape \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/s-$shape-$label/bench-all.md | cut -d'|' -f2-8 | tee -a $R
}
for shape in 1,8,128,64 1,8,512,128 1,4,1024,64 1,8,1024,64; do
  s $shape off FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT=0
  s $shape on FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT=1
done
pack
if awk "BEGIN {exit !($(sum on) < $(sum off))}"; then
  SECONDS=0
  run() { name=$1; shift; (env "$@" > $L/$name.log 2>&1; echo "$name rc=$? (${SECONDS}s)" >> /tmp/v1/rc.txt) & }
  run verify-default timeout 330 $X verify --kernels persistent-hopper --cases 1000 --seed 1902
  run verify-forced timeout 330 env $FORCE $X verify --kernels persistent-hopper --cases 1000 --seed 1903
  run sanitize-default timeout 330 $X sanitize --pass fwd --kernels persistent-hopper --logs $L/san-default
  run determinism-forced timeout 330 env $FORCE $X reliability --only determinism --kernels persistent-hopper
  wait
  env $FORCE timeout 200 $X sanitize --pass fwd --kernels persistent-hopper --logs $L/san-forced > $L/sanitize-forced.log 2>&1
  echo "sanitize-forced rc=$?" >> /tmp/v1/rc.txt
  sort /tmp/v1/rc.txt | tee -a $R
  for v in default forced; do
    echo "verify $v: $(grep -h 'passed, ' $L/verify-$v.log | tail -1)" | tee -a $R
    grep -h -B1 -A6 "FAIL\|shrunk" $L/verify-$v.log | head -16 | tee -a $R
  done
  grep -E "^[a-z]+ +persistent|reliability:" $L/determinism-forced.log | cut -c1-120 | tee -a $R
  grep -hE "^\| persistent" $L/sanitize-default.log $L/sanitize-forced.log | tee -a $R
  grep -h -i "error" $L/sanitize-default.log $L/sanitize-forced.log | head -10 | tee -a $R
  pack
  timeout 150 $X bench-all --suite mission --causal both --kernels persistent-hopper --out-dir $L/mission-peers > $L/mission-peers.log 2>&1
  echo "== mission suite with peers: rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| [a-z]" $L/mission-peers/bench-all.md | cut -d'|' -f2-8 | tee -a $R
else
  echo "cluster split not faster at the mission shape: correctness and peers skipped" | tee -a $R
fi
pack
