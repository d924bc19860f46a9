# First decode run: the verify sweep through the split-KV decode kernel on both gen-5 paths.
# FLASHCORE_DECODE=force sends every case (every mode, GQA, causal, tails) to the decode kernel;
# FLASHCORE_DECODE_SPLITS forces the split count (unset: the plan's heuristic).
# Run from the repo root: bash docs/results/2026-11-25-decode-h100/run1.sh
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/run1.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
v() { # name kernel cases env...
  local name=$1 k=$2 n=$3; shift 3
  env "$@" timeout 110 $X verify --kernels $k --cases $n > $OUT/verify-$name.log 2>&1; local rc=$?
  echo "$name ($*) rc=$rc: $(grep -h 'passed, ' $OUT/verify-$name.log | tail -1)" | tee -a $R
  grep -h -m3 -iE "fail|panic|error" $OUT/verify-$name.log | cut -c1-300 | tee -a $R
}
v hopper-force-auto persistent-hopper 250 FLASHCORE_DECODE=force
v hopper-force-s1 persistent-hopper 150 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=1
v hopper-force-s3 persistent-hopper 150 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=3
v hopper-force-s16 persistent-hopper 150 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=16
v portable-force-s5 persistent-portable 150 FLASHCORE_DECODE=force FLASHCORE_DECODE_SPLITS=5
v hopper-default persistent-hopper 250 X=1
