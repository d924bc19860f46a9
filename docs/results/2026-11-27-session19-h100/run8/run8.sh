# Eighth run of session 19 (H100): a quarter of the key-split softmax's exponentials on the FMA
# pipe (FlashAttention-4's trick: 2^x from a degree-3 polynomial and the exponent bits). run7: with
# both warpgroups' exponentials due at once the MUFU (16 a cycle) holds the step; the FMA pipe is
# ~12 % busy (run5). Predicted: 0.1-0.2 µs off the mission shape. Only the key-split builds change
# (check-kernels --compare-ptx). .carry/xtask-r4 is run4's binary (run2's kernels).
# (1) verify --cases 200 default and with the warpgroups' key split forced (it covers 3- and
#     4-tile items, causal and not);
# (2) the mission shape, r4 against this tree, alternating three times; the timeline;
# (3) if faster: verify --cases 1000 default, key split forced, cluster split forced; sanitize
#     default and forced; determinism and non-finite inputs forced; the mission suite with every peer.
# Run from the repo root: bash docs/results/2026-11-27-session19-h100/run8/run8.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run8.txt; L=/tmp/logs8; mkdir -p $L /tmp/v8
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs8; cd - > /dev/null; }
WG="FLASHCORE_HOPPER_WG_KEY_SPLIT=1 FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT=0"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
timeout 200 $X verify --kernels persistent-hopper --cases 200 --seed 1981 > $L/quick-default.log 2>&1 &
env $WG timeout 200 $X verify --kernels persistent-hopper --cases 200 --seed 1982 > $L/quick-wg.log 2>&1 &
wait
for v in default wg; do
  echo "== quick verify $v: $(grep -h 'passed, ' $L/quick-$v.log | tail -1)" | tee -a $R
  grep -h -B1 -A8 "FAIL\|shrunk" $L/quick-$v.log | head -20 | tee -a $R
done
m() {  # label, binary
  label=$1; x=$2
  timeout 100 $x bench-all --suite mission --causal both --kernels persistent-hopper --no-peers --out-dir $L/m-$label > $L/m-$label.log 2>&1
  echo "== mission $label ($x): rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/m-$label/bench-all.md | cut -d'|' -f2-8 | tee -a $R | tee -a $L/sum-${label%-*}.txt
}
for round in 1 2 3; do m r4-$round .carry/xtask-r4; m new-$round $X; done
sum() { awk -F'|' '{s += $6} END {printf "%.2f", s}' $L/sum-$1.txt; }
echo "mission sums (6 rows each): r4 $(sum r4), this tree $(sum new)" | tee -a $R
FLASHCORE_HOPPER_TRACE=1 timeout 100 $X bench-all --shape 1,8,512,64 --causal off --kernels persistent-hopper --no-peers --repeats 3 --max-seconds-per-shape 1 --out-dir $L/trace > $L/trace.log 2>&1
echo "== trace mission: rc=$?" | tee -a $R
grep -h "fwd-trace" $L/trace.log | grep -v "tile [0-9]" | head -12 | tee -a $R
pack
if awk "BEGIN {exit !($(sum new) < $(sum r4))}"; then
  SECONDS=0
  run() { name=$1; shift; (env "$@" > $L/$name.log 2>&1; echo "$name rc=$? (${SECONDS}s)" >> /tmp/v8/rc.txt) & }
  run verify-default timeout 330 $X verify --kernels persistent-hopper --cases 1000 --seed 1983
  run verify-wg timeout 330 env $WG $X verify --kernels persistent-hopper --cases 1000 --seed 1984
  run verify-cluster timeout 330 env FLASHCORE_HOPPER_WG_KEY_SPLIT=1 FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT=1 $X verify --kernels persistent-hopper --cases 1000 --seed 1985
  run sanitize-default timeout 330 $X sanitize --pass fwd --kernels persistent-hopper --logs $L/san-default
  run determinism-wg timeout 330 env $WG $X reliability --only determinism --kernels persistent-hopper
  run nonfinite-wg timeout 330 env $WG $X reliability --only nonfinite --kernels persistent-hopper
  wait
  env $WG timeout 200 $X sanitize --pass fwd --kernels persistent-hopper --logs $L/san-wg > $L/sanitize-wg.log 2>&1
  echo "sanitize-wg rc=$? (${SECONDS}s)" >> /tmp/v8/rc.txt
  sort /tmp/v8/rc.txt | tee -a $R
  for v in default wg cluster; do
    echo "verify $v: $(grep -h 'passed, ' $L/verify-$v.log | tail -1)" | tee -a $R
    grep -h -B1 -A6 "FAIL\|shrunk" $L/verify-$v.log | head -16 | tee -a $R
  done
  grep -hE "^[a-z]+ +persistent|reliability:" $L/determinism-wg.log $L/nonfinite-wg.log | cut -c1-120 | tee -a $R
  grep -hE "^\| persistent" $L/sanitize-default.log $L/sanitize-wg.log | tee -a $R
  pack
  pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1
  timeout 100 $X bench-all --suite mission --causal both --kernels persistent-hopper --fa3-path /tmp/fa3pkg --out-dir $L/mission-peers > $L/mission-peers.log 2>&1
  echo "== mission suite with peers: rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| [a-z]" $L/mission-peers/bench-all.md | cut -d'|' -f2-8,10 | tee -a $R
else
  echo "the FMA exponentials are not faster at the mission shape: correctness and peers skipped" | tee -a $R
fi
pack
