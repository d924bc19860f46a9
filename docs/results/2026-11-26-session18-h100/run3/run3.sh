# Third run of session 18 (H100). This tree: key-split warpgroups on by default where the 64-row
# items fit one round and either leave half the SMs free or (D = 64) have >= 8 key tiles; a 4-deep
# ring at D = 64; the producer issues each pair of tiles K, K, V, V (run2's timeline: warpgroup 2's
# first K landed 674 cycles after Q, behind V_0, and warpgroup 1 then waited ~400 cycles for it at
# the exchange); the epilogue's block info loaded before the exchange. .carry/xtask-r2 is run2's
# binary (key split forced with FLASHCORE_HOPPER_WG_KEY_SPLIT=1 FLASHCORE_HOPPER_STAGES=4 there).
# (1) the mission shape, alternating twice: r2 on4, this tree's default, this tree without the L2
#     prefetch, this tree with key split off;
# (2) the timeline of this tree's mission build;
# (3) one-round shapes, this tree's default against key split off;
# (4) correctness: verify --cases 1000 with the default plans and with key split forced on every
#     dense problem; sanitize (forward, 4 tools) default and forced; determinism forced;
# (5) the mission suite beside SDPA flash and cuDNN (graph replay, launch floor), default plans.
# Run from the repo root: bash docs/results/2026-11-26-session18-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run3.txt; L=/tmp/logs3; mkdir -p $L /tmp/v3
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs3; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
m() {  # label, binary, env...
  label=$1; x=$2; shift 2
  env "$@" timeout 100 $x bench-all --suite mission --causal both --kernels persistent-hopper --no-peers --out-dir $L/m-$label > $L/m-$label.log 2>&1
  echo "== mission $label ($x $*): rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/m-$label/bench-all.md | cut -d'|' -f2-8 | tee -a $R
}
for round in 1 2; do
  m r2on4-$round .carry/xtask-r2 FLASHCORE_HOPPER_WG_KEY_SPLIT=1 FLASHCORE_HOPPER_STAGES=4
  m new-$round $X
  m newnopf-$round $X FLASHCORE_HOPPER_PREFETCH=0
  m newoff-$round $X FLASHCORE_HOPPER_WG_KEY_SPLIT=0
done
pack
FLASHCORE_HOPPER_TRACE=1 timeout 100 $X bench-all --shape 1,8,512,64 --causal off --kernels persistent-hopper --no-peers --repeats 3 --max-seconds-per-shape 1 --out-dir $L/trace > $L/trace.log 2>&1
echo "== trace mission (default): rc=$?" | tee -a $R
grep -h "fwd-trace" $L/trace.log | grep -v "tile [0-9]" | head -12 | tee -a $R
s() {  # shape, label, env...
  shape=$1; label=$2; shift 2
  env "$@" timeout 100 $X bench-all --shape $shape --causal both --kernels persistent-hopper --no-peers --out-dir $L/s-$shape-$label > $L/s-$shape-$label.log 2>&1
  echo "== $shape $label ($*): rc=$?" | tee -a $R
  grep -E "^\| $shape \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/s-$shape-$label/bench-all.md | cut -d'|' -f2-8 | tee -a $R
}
for shape in 1,8,128,64 1,8,1024,64 1,4,2048,64 1,8,512,128; do
  s $shape default
  s $shape off FLASHCORE_HOPPER_WG_KEY_SPLIT=0
done
pack
SECONDS=0
run() { name=$1; shift; (env "$@" > $L/$name.log 2>&1; echo "$name rc=$? (${SECONDS}s)" >> /tmp/v3/rc.txt) & }
run verify-default timeout 330 $X verify --kernels persistent-hopper --cases 1000 --seed 1804
run verify-forced timeout 330 env FLASHCORE_HOPPER_WG_KEY_SPLIT=1 $X verify --kernels persistent-hopper --cases 1000 --seed 1805
run sanitize-default timeout 330 $X sanitize --pass fwd --kernels persistent-hopper --logs $L/san-default
run determinism-forced timeout 330 env FLASHCORE_HOPPER_WG_KEY_SPLIT=1 $X reliability --only determinism --kernels persistent-hopper
wait
FLASHCORE_HOPPER_WG_KEY_SPLIT=1 timeout 200 $X sanitize --pass fwd --kernels persistent-hopper --logs $L/san-forced > $L/sanitize-forced.log 2>&1
echo "sanitize-forced rc=$?" >> /tmp/v3/rc.txt
sort /tmp/v3/rc.txt | tee -a $R
for v in default forced; do
  echo "verify $v: $(grep -h 'passed, ' $L/verify-$v.log | tail -1)" | tee -a $R
  grep -h -B1 -A6 "FAIL\|shrunk" $L/verify-$v.log | head -16 | tee -a $R
done
grep -E "^[a-z]+ +persistent|reliability:" $L/determinism-forced.log | cut -c1-120 | tee -a $R
grep -hE "^\| persistent" $L/sanitize-default.log $L/sanitize-forced.log | tee -a $R
pack
timeout 150 $X bench-all --suite mission --causal both --kernels persistent-hopper --out-dir $L/mission-peers > $L/mission-peers.log 2>&1
echo "== mission suite with peers: rc=$?" | tee -a $R
grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| [a-z]" $L/mission-peers/bench-all.md | cut -d'|' -f2-8 | tee -a $R
pack
