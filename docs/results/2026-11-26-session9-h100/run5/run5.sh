# Fifth run of session 9 (H100): programmatic dependent launch for the Hopper forward. The kernel
# signals griddepcontrol.launch_dependents at its start and waits (griddepcontrol.wait) after
# its setup, before any global-memory access; the plan launches it with programmatic stream
# serialization (cuLaunchKernelEx) unless FLASHCORE_HOPPER_PDL=0.
# 1. verify --cases 1000, reliability (determinism, streams, oob, nonfinite, modes) and sanitize
#    (Hopper), side by side, with PDL on (the default);
# 2. the mission shape, graph replay: this binary with PDL on, with PDL off, and 7986516
#    (.carry/xtask-final), alternated three times;
# 3. the ladder beside every peer, FA3 through flash-attn3-jax in the same run.
# Needs in .carry/: xtask, xtask-final, anchors/, flash_attn3_jax-0.2.3-cp312-*.whl, einops-*.whl.
# Run from the repo root: bash docs/results/2026-11-26-session9-h100/run5/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run5.txt; L=/tmp/logs5; mkdir -p $L /tmp/v5
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
pip install -q --no-deps --target /tmp/fa3pkg .carry/flash_attn3_jax-0.2.3-*.whl .carry/einops-*.whl > $L/pip.log 2>&1; echo "pip rc=$?" | tee -a $R
SECONDS=0
(timeout 200 $X verify --kernels persistent-hopper --cases 1000 --seed 9501 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v5/rc.txt) &
(timeout 200 $X reliability --only determinism,streams,oob,nonfinite,modes --kernels persistent-hopper > $L/reliability.log 2>&1; echo "reliability rc=$? (${SECONDS}s)" >> /tmp/v5/rc.txt) &
(timeout 200 $X sanitize --kernels persistent-hopper --pass fwd --logs /tmp/san5 > $L/sanitize-hopper.log 2>&1; echo "sanitize hopper rc=$? (${SECONDS}s)" >> /tmp/v5/rc.txt) &
wait
sort /tmp/v5/rc.txt | tee -a $R
echo "verify: $(grep -h 'passed, ' $L/verify.log | tail -1)" | tee -a $R; grep -h -A5 "FAIL\|shrunk" $L/verify.log | head -8 | tee -a $R
grep -E "^[a-z]+ +persistent-hopper" $L/reliability.log | cut -c1-90 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize-hopper.log | grep -v "^sanitize: /" | grep "^|\|^sanitize" | tee -a $R
for i in 1 2 3; do for b in on off final; do
  case $b in on) E="";; off) E="FLASHCORE_HOPPER_PDL=0";; final) E="";; esac
  B=.carry/xtask; [ $b = final ] && B=.carry/xtask-final
  env $E timeout 60 $B bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir /tmp/m-$b-$i > $L/mission-$b-$i.log 2>&1
  echo "mission $b $i: $(grep -E '^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph' /tmp/m-$b-$i/bench-all.md | cut -d'|' -f4,7 | tr '\n' ' ')" | tee -a $R
done; done
SECONDS=0
timeout 280 $X bench-all --suite ladder --kernels persistent-hopper --fa3-path /tmp/fa3pkg --anchors .carry/anchors --max-seconds-per-kernel 40 --out-dir /tmp/ladder > $L/bench-ladder.log 2>&1; echo "bench ladder rc=$? (${SECONDS}s)" | tee -a $R
cp /tmp/ladder/bench-all.md $L/ladder-bench-all.md; cp /tmp/ladder/*.json $L/ 2>/dev/null
grep -E "^\| [0-9,]+ \| f16 \| (no|yes) \| " /tmp/ladder/bench-all.md | grep -v "efficient\|math" | cut -d"|" -f2-8 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs5
