# Third run of session 16 (H100): correctness of the decode combine that issues every split's loads
# at once (up to 16 splits). verify --cases 1000 through the forced decode kernel with swept split
# counts (1..256: both combine paths), Hopper and portable paths; the default Hopper plan;
# determinism (1000 decode runs bit-identical) on both paths; sanitize with 4 forced splits.
# Needs in .carry/: xtask (this tree).
# Run from the repo root: bash docs/results/2026-11-26-session16-h100/run3/run3.sh
export FLASHCORE_CACHE_DIR=/tmp/fc; X=.carry/xtask; R=$OUT/run3.txt; L=/tmp/logs3; mkdir -p $L /tmp/v3
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
run() { name=$1; shift; (env "$@" > $L/$name.log 2>&1; echo "$name rc=$? (${SECONDS}s)" >> /tmp/v3/rc.txt) & }
run sweep-hopper FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 400 $X verify --kernels persistent-hopper --cases 1000 --seed 1611
run sweep-portable FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=sweep timeout 400 $X verify --kernels persistent-portable --cases 1000 --seed 1612
run default-hopper timeout 400 $X verify --kernels persistent-hopper --cases 1000 --seed 1613
run reliability timeout 400 $X reliability --only determinism,streams --kernels persistent-hopper,persistent-portable
run sanitize FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=4 timeout 400 $X sanitize --pass fwd --kernels persistent-hopper,persistent-portable
wait
sort /tmp/v3/rc.txt | tee -a $R
for n in sweep-hopper sweep-portable default-hopper; do echo "$n: $(grep -h 'passed, ' $L/$n.log | tail -1)" | tee -a $R; done
grep -h -B1 -A4 "FAIL\|shrunk" $L/sweep-*.log $L/default-*.log | head -20 | tee -a $R
grep -E "^[a-z]+ +persistent|reliability:" $L/reliability.log | cut -c1-120 | tee -a $R
grep -hE "^\| persistent|^sanitize: no|errors" $L/sanitize.log | grep "^|\|^sanitize" | tee -a $R
cd /tmp && tar cJf $OUT/logs.tar.xz logs3
