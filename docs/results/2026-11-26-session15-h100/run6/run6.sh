# Sixth run of session 15 (H100): programmatic dependent launch for the Hopper forward, with the
# graph edge that makes it real under graph replay. Session 9 (run5) timed the same kernel change
# and found nothing, but its bench built every graph edge as a full-completion edge, so the
# replays never used it; the bench now adds a programmatic edge before a programmatic launch, as a
# stream capture records it. The kernel signals griddepcontrol.launch_dependents at its start
# and waits (griddepcontrol.wait) after its setup, before any global-memory access.
# (1) verify --cases 1000, reliability (determinism, streams, oob, nonfinite, modes), sanitize
#     --pass fwd on persistent-hopper, PDL on (the default), side by side;
# (2) the mission shape, graph replay: PDL on against FLASHCORE_HOPPER_PDL=0, three alternations;
#     (4,16,2048,128) and (4,16,2048,64) once each way.
# Needs in .carry/: xtask (this tree).
# Run from the repo root: bash docs/results/2026-11-26-session15-h100/run6/run6.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run6.txt; L=/tmp/logs6; mkdir -p $L /tmp/v6
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
(timeout 300 $X verify --kernels persistent-hopper --cases 1000 --seed 1506 > $L/verify.log 2>&1; echo "verify rc=$? (${SECONDS}s)" >> /tmp/v6/rc.txt) &
(timeout 300 $X reliability --only determinism,streams,oob,nonfinite,modes --kernels persistent-hopper > $L/reliability.log 2>&1; echo "reliability rc=$? (${SECONDS}s)" >> /tmp/v6/rc.txt) &
(timeout 300 $X sanitize --pass fwd --kernels persistent-hopper > $L/sanitize.log 2>&1; echo "sanitize rc=$? (${SECONDS}s)" >> /tmp/v6/rc.txt) &
wait
sort /tmp/v6/rc.txt | tee -a $R
grep -h 'passed, ' $L/verify.log | tail -1 | tee -a $R
grep -h -B1 -A4 "FAIL\|shrunk" $L/verify.log | head -20 | tee -a $R
grep -E "^[a-z]+ +persistent-hopper|reliability:" $L/reliability.log | cut -c1-120 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize.log | grep "^|\|^sanitize" | tee -a $R
for i in 1 2 3; do for v in on off; do
  E=A=1; [ $v = off ] && E=FLASHCORE_HOPPER_PDL=0
  env $E timeout 60 $X bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir $L/m-$v-$i > $L/mission-$v-$i.log 2>&1
  echo "mission PDL $v $i: $(grep -E '^\| 1,8,512,64 \| f16 \| (no|yes) \| (persistent-hopper|launch floor)[^|]* \| graph' $L/m-$v-$i/bench-all.md | cut -d'|' -f4,5,7 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
done; done
for v in on off; do
  E=A=1; [ $v = off ] && E=FLASHCORE_HOPPER_PDL=0
  env $E timeout 100 $X bench-all --shape 4,16,2048,128 --shape 4,16,2048,64 --dtypes f16 --kernels persistent-hopper --no-peers --out-dir $L/l-$v > $L/ladder-$v.log 2>&1
  echo "ladder PDL $v: $(grep -E '^\| 4,16,2048,[0-9]+ \| f16 \| (no|yes) \| persistent-hopper \| [a-z]' $L/l-$v/bench-all.md | cut -d'|' -f2,4,6,7 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
done
cd /tmp && tar cJf $OUT/logs.tar.xz logs6
