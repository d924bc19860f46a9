# Second run of session 19 (H100). This tree: the cluster key split (run1) by default only where
# 64-row items fit one round as clusters and have 8+ key tiles (run1: (1,4,1024,64) 7.25 / 7.39 ->
# 6.28 / 5.95 µs, the mission shape level or slower); the decode suite gains a read-only probe
# (a kernel that reads each row's K/V byte count, timed like the copy) beside the copy ceiling;
# the key-split producer steps its ring through one helper (its PTX changed; every other build's
# is the same as session 18's). .carry/xtask-s18 is session 18's final binary (df12f9f).
# (1) correctness: verify --cases 1000 with the default plans, with the cluster key split forced
#     on every dense problem and with the warpgroups' key split alone forced; sanitize (memcheck,
#     racecheck, synccheck, initcheck) default and cluster-forced; determinism cluster-forced;
# (1b) the mission shape, session 18's binary against this tree, alternating twice;
# (2) the mission suite with every peer (SDPA flash, cuDNN, FA3) and the launch floor;
# (3) the decode suite with every peer, the anchors, the copy ceiling and the read probe;
# (4) long one-round shapes, cluster split off against on (what the rule should cover).
# Needs in .carry/: xtask (this tree), flash_attn3_jax and einops wheels, anchors/.
# Run from the repo root: bash docs/results/2026-11-27-session19-h100/run2/run2.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run2.txt; L=/tmp/logs2; mkdir -p $L /tmp/v2
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs2; cd - > /dev/null; }
FORCE="FLASHCORE_HOPPER_WG_KEY_SPLIT=1 FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT=1"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
SECONDS=0
run() { name=$1; shift; (env "$@" > $L/$name.log 2>&1; echo "$name rc=$? (${SECONDS}s)" >> /tmp/v2/rc.txt) & }
run verify-default timeout 330 $X verify --kernels persistent-hopper --cases 1000 --seed 1911
run verify-forced timeout 330 env $FORCE $X verify --kernels persistent-hopper --cases 1000 --seed 1912
run verify-forced-wg timeout 330 env FLASHCORE_HOPPER_WG_KEY_SPLIT=1 FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT=0 $X verify --kernels persistent-hopper --cases 1000 --seed 1913
run sanitize-default timeout 330 $X sanitize --pass fwd --kernels persistent-hopper --logs $L/san-default
run determinism-forced timeout 330 env $FORCE $X reliability --only determinism --kernels persistent-hopper
wait
env $FORCE timeout 200 $X sanitize --pass fwd --kernels persistent-hopper --logs $L/san-forced > $L/sanitize-forced.log 2>&1
echo "sanitize-forced rc=$? (${SECONDS}s)" >> /tmp/v2/rc.txt
sort /tmp/v2/rc.txt | tee -a $R
for v in default forced forced-wg; do
  echo "verify $v: $(grep -h 'passed, ' $L/verify-$v.log | tail -1)" | tee -a $R
  grep -h -B1 -A6 "FAIL\|shrunk" $L/verify-$v.log | head -16 | tee -a $R
done
grep -E "^[a-z]+ +persistent|reliability:" $L/determinism-forced.log | cut -c1-120 | tee -a $R
grep -hE "^\| persistent" $L/sanitize-default.log $L/sanitize-forced.log | tee -a $R
grep -h -i "error" $L/sanitize-default.log $L/sanitize-forced.log | head -10 | tee -a $R
pack
m() {  # label, binary
  label=$1; x=$2
  timeout 100 $x bench-all --suite mission --causal both --kernels persistent-hopper --no-peers --out-dir $L/m-$label > $L/m-$label.log 2>&1
  echo "== mission $label ($x): rc=$?" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/m-$label/bench-all.md | cut -d'|' -f2-8 | tee -a $R
}
for round in 1 2; do m s18-$round .carry/xtask-s18; m new-$round $X; done
for i in 1; do
  SECONDS=0
  timeout 100 $X bench-all --suite mission --causal both --kernels persistent-hopper --fa3-path /tmp/fa3pkg --out-dir $L/mission-$i > $L/mission-$i.log 2>&1
  echo "== mission suite with peers ($i): rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| 1,8,512,64 \| f16 \| (no|yes) \| [a-z]" $L/mission-$i/bench-all.md | cut -d'|' -f2-8,10 | tee -a $R
done
pack
SECONDS=0
timeout 240 $X bench-all --suite decode --kernels persistent-hopper --fa3-path /tmp/fa3pkg --anchors .carry/anchors --out-dir $L/decode > $L/bench-decode.log 2>&1; echo "bench decode rc=$? (${SECONDS}s)" | tee -a $R
grep -E "^\| B=" $L/decode/bench-decode.md | cut -d'|' -f2,5-12 | sed 's/(decode[^)]*)//; s/(speculative[^)]*)//; s/(chunked[^)]*)//' | cut -c1-200 | tee -a $R
sed -n '/### Copy ceiling/,$p' $L/decode/bench-decode.md | head -30 | tee -a $R
grep -A14 "Is 1.05" $L/decode/bench-decode.md | tee -a $R
pack
s() {  # shape, label, env...
  shape=$1; label=$2; shift 2
  env "$@" timeout 100 $X bench-all --shape $shape --causal both --kernels persistent-hopper --no-peers --out-dir $L/s-$shape-$label > $L/s-$shape-$label.log 2>&1
  echo "== $shape $label ($*): rc=$?" | tee -a $R
  grep -E "^\| $shape \| f16 \| (no|yes) \| persistent-hopper \| [a-z]" $L/s-$shape-$label/bench-all.md | cut -d'|' -f2-8 | tee -a $R
}
for shape in 1,4,1024,64 1,4,1024,128 1,2,2048,64 1,2,2048,128 1,1,4096,128; do
  s $shape off FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT=0
  s $shape on FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT=1
done
pack
