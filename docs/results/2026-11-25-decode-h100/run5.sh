# Fifth decode run: the combine reads each split's LSE once and streams the O rows with weights
# from shared memory. Same-run A/B against run4's binary (.carry/xtask-run4) on the rows with
# the most splits, alternated twice; verify through the decode kernel with 40 and 256 forced splits
# (more splits than a warp's lanes).
# Run from the repo root: bash docs/results/2026-11-25-decode-h100/run5.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run5.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
for i in 1 2; do for b in xtask-run4 xtask; do
  timeout 90 .carry/$b bench-all --suite decode --kernels persistent-hopper --no-peers --case sk32768 --case b8-hq32-hkv8-sq1-sk8192 --case sq4 --out-dir /tmp/ab-$b-$i > $OUT/ab-$b-$i.log 2>&1
  echo "A/B $b try $i rc=$?" | tee -a $R
  grep -E "^\| B=" /tmp/ab-$b-$i/bench-decode.md | cut -d'|' -f2,5,6 | tee -a $R
done; done
for s in 40 256; do
  FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=$s timeout 80 $X verify --kernels persistent-hopper --cases 150 > $OUT/verify-force-s$s.log 2>&1
  echo "verify force splits=$s rc=$? $(grep -h 'passed, ' $OUT/verify-force-s$s.log | tail -1)" | tee -a $R
done
FLASHCORE_DECODE=force timeout 80 $X verify --kernels persistent-hopper --cases 200 --seed 7 > $OUT/verify-force-auto.log 2>&1
echo "verify force auto seed 7 rc=$? $(grep -h 'passed, ' $OUT/verify-force-auto.log | tail -1)" | tee -a $R
