# Fourth run of session 18 (H100). run3: the mission shape 5.00 / 4.95-4.98 µs with key-split
# warpgroups by default (verify 1000 default and forced 1122/0 each, sanitize 0, determinism
# PASS); the pair order and the early block info changed nothing (5.00-5.01 / 4.96-4.98 before);
# without the L2 prefetch 5.48 / 5.47. Its timeline: CTA 0's Q landed 1 895 cycles after its
# consumers began, CTAs 32 and 63's after ~450; CTA 0 had the shortest wait after its prefetches
# (9 per CTA, 136 KiB). This tree: the key-split build's CTAs share the prefetch of a head's first
# K/V tiles (box j by q tile j mod q tiles a head: one box each at the mission shape).
# .carry/xtask-r3 is run3's binary.
# (1) the mission shape, alternating three times: r3 against this tree;
# (2) this tree's timeline of the mission shape;
# (3) one-round shapes: r3 against this tree (default plans), and this tree with key split off;
# (4) correctness of this tree: verify --cases 1000 default plans and key split forced; sanitize
#     (forward) default and forced; determinism forced;
# (5) the mission suite beside SDPA flash and cuDNN (graph replay, launch floor), this tree.
# Run from the repo root: bash docs/results/2026-11-26-session18-h100/run4/run4.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run4.txt; L=/tmp/logs4; mkdir -p $L /tmp/v4
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs4; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
m() {  # label, binary, env...
  label=$1; x=$2; shift 2
  env "$@" timeout 100 $x bench-all --suite mission --causal both --kernels persistent-hopper --no-peers --out-dir $L/m-$label > $L/m-$label.log 2>&1
  echo "== mission $label ($x $*): rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/m-$label/bench-all.md | cut -d'|' -f2-8 | tee -a $R
}
for round in 1 2 3; do
  m r3-$round .carry/xtask-r3
  m new-$round $X
done
pack
FLASHCORE_HOPPER_TRACE=1 timeout 100 $X bench-all --shape 1,8,512,64 --causal off --kernels persistent-hopper --no-peers --repeats 3 --max-seconds-per-shape 1 --out-dir $L/trace > $L/trace.log 2>&1
echo "== trace mission (this tree): rc=$?" | tee -a $R
grep -h "fwd-trace" $L/trace.log | grep -v "tile [0-9]" | head -12 | tee -a $R
s() {  # shape, label, binary, env...
  shape=$1; label=$2; x=$3; shift 3
  env "$@" timeout 100 $x bench-all --shape $shape --causal both --kernels persistent-hopper --no-peers --out-dir $L/s-$shape-$label > $L/s-$shape-$label.log 2>&1
  echo "== $shape $label ($x $*): rc=$?" | tee -a $R
  grep -E "^\| $shape \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/s-$shape-$label/bench-all.md | cut -d'|' -f2-8 | tee -a $R
}
for shape in 1,8,128,64 1,8,1024,64 1,4,2048,64 1,8,512,128; do
  s $shape r3 .carry/xtask-r3
  s $shape new $X
  s $shape off $X FLASHCORE_HOPPER_WG_KEY_SPLIT=0
done
pack
SECONDS=0
run() { name=$1; shift; (env "$@" > $L/$name.log 2>&1; echo "$name rc=$? (${SECONDS}s)" >> /tmp/v4/rc.txt) & }
run verify-default timeout 330 $X verify --kernels persistent-hopper --cases 1000 --seed 1806
run verify-forced timeout 330 env FLASHCORE_HOPPER_WG_KEY_SPLIT=1 $X verify --kernels persistent-hopper --cases 1000 --seed 1807
run sanitize-default timeout 330 $X sanitize --pass fwd --kernels persistent-hopper --logs $L/san-default
run determinism-forced timeout 330 env FLASHCORE_HOPPER_WG_KEY_SPLIT=1 $X reliability --only determinism --kernels persistent-hopper
wait
FLASHCORE_HOPPER_WG_KEY_SPLIT=1 timeout 200 $X sanitize --pass fwd --kernels persistent-hopper --logs $L/san-forced > $L/sanitize-forced.log 2>&1
echo "sanitize-forced rc=$?" >> /tmp/v4/rc.txt
sort /tmp/v4/rc.txt | tee -a $R
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
