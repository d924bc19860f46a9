# Ninth run of session 15 (H100): every programmatic kernel now signals launch_dependents after its
# own griddepcontrol.wait, not before it (run8: signalled at the start, launches ran ahead and the
# two-split decode rows were 14-16 % slower, chunked prefill 3 %).
# (1) verify through the forced decode kernel with swept split counts (300 cases), the default
#     Hopper plan (300 cases);
# (2) PDL on against off (FLASHCORE_DECODE_PDL=0 FLASHCORE_HOPPER_PDL=0), alternated twice: the
#     decode rows that split or run one CTA an SM, chunked prefill, and the mission shape.
# Needs in .carry/: xtask (this tree).
# Run from the repo root: bash docs/results/2026-11-26-session15-h100/run9/run9.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run9.txt; L=/tmp/logs9; mkdir -p $L /tmp/v9
pack() { cd /tmp && tar cJf $OUT/logs.tar.xz logs9; cd - > /dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
(FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 150 $X verify --kernels persistent-hopper --cases 300 --seed 1591 > $L/sweep.log 2>&1; echo "sweep rc=$? (${SECONDS}s)" >> /tmp/v9/rc.txt) &
(timeout 150 $X verify --kernels persistent-hopper --cases 300 --seed 1592 > $L/default.log 2>&1; echo "default rc=$? (${SECONDS}s)" >> /tmp/v9/rc.txt) &
wait
sort /tmp/v9/rc.txt | tee -a $R
for n in sweep default; do echo "$n: $(grep -h 'passed, ' $L/$n.log | tail -1)" | tee -a $R; done
grep -h -B1 -A4 "FAIL\|shrunk" $L/sweep.log $L/default.log | head -20 | tee -a $R
for rep in 1 2; do for v in on off; do
  E=A=1; [ $v = off ] && E="FLASHCORE_DECODE_PDL=0 FLASHCORE_HOPPER_PDL=0"
  env $E timeout 80 $X bench-all --suite decode --kernels persistent-hopper --no-peers --case contig --out-dir $L/$v$rep > $L/bench-$v$rep.log 2>&1
  echo "decode PDL $v $rep rc=$?: $(grep -E '^\| B=' $L/$v$rep/bench-decode.md | cut -d'|' -f6 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
  env $E timeout 60 $X bench-all --suite mission --kernels persistent-hopper --no-peers --out-dir $L/m-$v$rep > $L/mission-$v$rep.log 2>&1
  echo "mission PDL $v $rep: $(grep -E '^\| 1,8,512,64 \| f16 \| (no|yes) \| persistent-hopper \| graph' $L/m-$v$rep/bench-all.md | cut -d'|' -f4,7 | tr '\n' ' ' | tr -s ' ')" | tee -a $R
  pack
done; done
