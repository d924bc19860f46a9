# Thirteenth run of session 9 (H100): the forward's L2 sections at a quarter of L2 (12.5 MiB on
# the H100; run12). Every Hopper forward module's FC_HOPPER_L2_SECTION_BYTES changed (the code did
# not), so: verify --cases 1000, reliability (determinism, streams, modes) and sanitize (forward)
# side by side; the ladder with every peer (FA3 through flash-attn3-jax) in the same run; the
# paged and varlen suites (their causal rows use the sections), no peers.
# Needs in .carry/: xtask, anchors/, flash_attn3_jax-0.2.3-cp312-*.whl, einops-*.whl.
# Run from the repo root: bash docs/results/2026-11-26-session9-h100/run13/run13.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run13.txt; L=/tmp/logs13; mkdir -p $L /tmp/v13
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
SECONDS=0
(timeout 200 $X verify --kernels persistent-hopper --cases 1000 --seed 9131 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v13/rc.txt) &
(timeout 200 $X reliability --only determinism,streams,modes --kernels persistent-hopper > $L/reliability.log 2>&1; echo "reliability rc=$? (${SECONDS}s)" >> /tmp/v13/rc.txt) &
(timeout 200 $X sanitize --kernels persistent-hopper --pass fwd --logs /tmp/san13 > $L/sanitize.log 2>&1; echo "sanitize rc=$? (${SECONDS}s)" >> /tmp/v13/rc.txt) &
wait
sort /tmp/v13/rc.txt | tee -a $R
grep -hE "passed, " $L/verify.log | tail -1 | tee -a $R; grep -h -A5 "FAIL\|shrunk\|still running" $L/verify.log | head -8 | tee -a $R
grep -E "^[a-z]+ +persistent-hopper" $L/reliability.log | cut -c1-90 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
SECONDS=0
timeout 280 $X bench-all --suite ladder --kernels persistent-hopper --fa3-path /tmp/fa3pkg --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir /tmp/ladder > $L/bench-ladder.log 2>&1; echo "bench ladder rc=$? (${SECONDS}s)" | tee -a $R
cp /tmp/ladder/bench-all.md $L/ladder-bench-all.md; cp /tmp/ladder/*.json $L/ 2>/dev/null
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| (persistent-hopper|sdpa_flash|sdpa_cudnn|fa3) \| " /tmp/ladder/bench-all.md | cut -d"|" -f2-8 | tee -a $R
for s in paged varlen; do
  timeout 90 $X bench-all --suite $s --kernels persistent-hopper --no-peers --out-dir /tmp/b13-$s > $L/bench-$s.log 2>&1; echo "$s rc=$?" | tee -a $R
  cp /tmp/b13-$s/bench-$s.md $L/
  grep -E "time / contiguous time|^\| varlen TFLOP" /tmp/b13-$s/bench-$s.md | cut -d'|' -f2,4 | tr '\n' ' ' | tee -a $R; echo | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs13
