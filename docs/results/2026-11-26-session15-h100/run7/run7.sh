# Seventh run of session 15 (H100): programmatic dependent launch for the decode kernels too (the
# split kernel signals at its start and waits before its first global access; the combine waits
# before reading the partials), on top of the Hopper forward's (run6).
# (1) correctness: verify --cases 1000 through the forced decode kernel with swept split counts,
#     Hopper and portable paths, and the default Hopper plan; reliability (determinism, streams)
#     on both paths; sanitize with 4 forced splits;
# (2) the decode suite, PDL on against FLASHCORE_DECODE_PDL=0, alternated twice, no peers.
# Needs in .carry/: xtask (this tree).
# Run from the repo root: bash docs/results/2026-11-26-session15-h100/run7/run7.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run7.txt; L=/tmp/logs7; mkdir -p $L /tmp/v7
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
run() { name=$1; shift; (env "$@" > $L/$name.log 2>&1; echo "$name rc=$? (${SECONDS}s)" >> /tmp/v7/rc.txt) & }
run sweep-hopper FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 300 $X verify --kernels persistent-hopper --cases 1000 --seed 1571
run sweep-portable FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 300 $X verify --kernels persistent-portable --cases 1000 --seed 1572
run default-hopper timeout 300 $X verify --kernels persistent-hopper --cases 1000 --seed 1573
run reliability timeout 300 $X reliability --only determinism,streams --kernels persistent-hopper,persistent-portable
run sanitize FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=4 timeout 300 $X sanitize --pass fwd --kernels persistent-hopper,persistent-portable
wait
sort /tmp/v7/rc.txt | tee -a $R
for n in sweep-hopper sweep-portable default-hopper; do echo "$n: $(grep -h 'passed, ' $L/$n.log | tail -1)" | tee -a $R; done
grep -h -B1 -A4 "FAIL\|shrunk" $L/sweep-*.log $L/default-*.log | head -20 | tee -a $R
grep -E "^[a-z]+ +persistent|reliability:" $L/reliability.log | cut -c1-120 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize.log | grep "^|\|^sanitize" | tee -a $R
for rep in 1 2; do for v in on off; do
  E=A=1; [ $v = off ] && E=FLASHCORE_DECODE_PDL=0
  SECONDS=0
  env $E timeout 120 $X bench-all --suite decode --kernels persistent-hopper --no-peers --out-dir $L/$v$rep > $L/bench-$v$rep.log 2>&1
  echo "bench PDL $v rep $rep rc=$? (${SECONDS}s)" | tee -a $R
done; done
echo "| row | storage | on1 | off1 | on2 | off2 |" | tee -a $R
paste -d'|' <(grep -E "^\| B=" $L/on1/bench-decode.md | cut -d'|' -f2,5,6) \
  <(grep -E "^\| B=" $L/off1/bench-decode.md | cut -d'|' -f6) \
  <(grep -E "^\| B=" $L/on2/bench-decode.md | cut -d'|' -f6) \
  <(grep -E "^\| B=" $L/off2/bench-decode.md | cut -d'|' -f6) | sed 's/(decode[^)]*)//; s/(speculative[^)]*)//; s/(chunked[^)]*)//' | cut -c1-200 | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs7
