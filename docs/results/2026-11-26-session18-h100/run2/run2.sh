# Second run of session 18 (H100). run1: key-split warpgroups took the mission shape 6.74 / 7.14 ->
# 5.34 / 5.44 µs (4-deep ring 5.06 / 4.91), verify 1122/0, determinism PASS, but synccheck failed
# every case. Its epilogue then called the exchange's named barrier from two instantiations (one
# per warpgroup); this tree has one code path (.carry/xtask; run1's binary is .carry/xtask-r1).
# (1) synccheck (logs kept): run1's binary forced on, this tree forced on and forced off;
# (2) verify --cases 200 forced on (the rewritten epilogue);
# (3) the mission shape, alternating twice: off, on, on with a 4-deep ring, that without ping-pong;
# (4) other one-round shapes (eager), off against on (and on4 at D = 64), both masks;
# (5) the timeline of the mission shape, key split with a 4-deep ring.
# Run from the repo root: bash docs/results/2026-11-26-session18-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run2.txt; L=/tmp/logs2; mkdir -p $L
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs2; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
sc() { label=$1; x=$2; shift 2
  env "$@" timeout 120 $x sanitize --tools synccheck --pass fwd --kernels persistent-hopper --logs $L/sc-$label > $L/sc-$label.log 2>&1
  echo "== synccheck $label ($x $*): rc=$? $(grep -h '^synccheck' $L/sc-$label.log | head -1)" | tee -a $R
}
sc r1-on .carry/xtask-r1 FLASHCORE_HOPPER_WG_KEY_SPLIT=1
sc new-on $X FLASHCORE_HOPPER_WG_KEY_SPLIT=1
sc new-off $X FLASHCORE_HOPPER_WG_KEY_SPLIT=0
grep -rh -m3 -A6 "Barrier\|barrier\|ERROR" $L/sc-r1-on | head -30 | tee -a $R
grep -rh -m3 -A6 "Barrier\|barrier\|ERROR" $L/sc-new-on | head -20 | tee -a $R
pack
SECONDS=0
FLASHCORE_HOPPER_WG_KEY_SPLIT=1 timeout 150 $X verify --kernels persistent-hopper --cases 200 --seed 1803 > $L/verify.log 2>&1
echo "== verify 200 forced on: rc=$? (${SECONDS}s): $(grep -h 'passed, ' $L/verify.log | tail -1)" | tee -a $R
grep -h -B1 -A6 "FAIL\|shrunk" $L/verify.log | head -24 | tee -a $R
m() {  # label, env...
  label=$1; shift
  env "$@" timeout 100 $X bench-all --suite mission --causal both --kernels persistent-hopper --no-peers --out-dir $L/m-$label > $L/m-$label.log 2>&1
  echo "== mission $label ($*): rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/m-$label/bench-all.md | cut -d'|' -f2-8 | tee -a $R
}
for round in 1 2; do
  m off-$round FLASHCORE_HOPPER_WG_KEY_SPLIT=0
  m on-$round FLASHCORE_HOPPER_WG_KEY_SPLIT=1
  m on4-$round FLASHCORE_HOPPER_WG_KEY_SPLIT=1 FLASHCORE_HOPPER_STAGES=4
  m on4nopp-$round FLASHCORE_HOPPER_WG_KEY_SPLIT=1 FLASHCORE_HOPPER_STAGES=4 FLASHCORE_HOPPER_PINGPONG=0
done
pack
s() {  # shape, label, env...
  shape=$1; label=$2; shift 2
  env "$@" timeout 100 $X bench-all --shape $shape --causal both --kernels persistent-hopper --no-peers --out-dir $L/s-$shape-$label > $L/s-$shape-$label.log 2>&1
  echo "== $shape $label ($*): rc=$?" | tee -a $R
  grep -E "^\| $shape \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/s-$shape-$label/bench-all.md | cut -d'|' -f2-8 | tee -a $R
}
for shape in 1,8,128,64 1,16,512,64 1,8,1024,64 1,4,2048,64; do
  s $shape off FLASHCORE_HOPPER_WG_KEY_SPLIT=0
  s $shape on FLASHCORE_HOPPER_WG_KEY_SPLIT=1
  s $shape on4 FLASHCORE_HOPPER_WG_KEY_SPLIT=1 FLASHCORE_HOPPER_STAGES=4
done
for shape in 1,8,512,128 1,8,1024,128; do
  s $shape off FLASHCORE_HOPPER_WG_KEY_SPLIT=0
  s $shape on FLASHCORE_HOPPER_WG_KEY_SPLIT=1
done
pack
FLASHCORE_HOPPER_WG_KEY_SPLIT=1 FLASHCORE_HOPPER_STAGES=4 FLASHCORE_HOPPER_TRACE=1 timeout 100 $X bench-all --shape 1,8,512,64 --causal off --kernels persistent-hopper --no-peers --repeats 3 --max-seconds-per-shape 1 --out-dir $L/trace > $L/trace.log 2>&1
echo "== trace mission (key split, 4 stages): rc=$?" | tee -a $R
grep -h "fwd-trace" $L/trace.log | head -16 | tee -a $R
pack
