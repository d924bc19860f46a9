#!/usr/bin/env bash
# Head dim 512 on the scalar forward (every mode), and candle-flash-attn 0.11.1's own tests, whose
# sixth needs it, on the H200. From the repo root, with .carry/xtask and
# .carry/candle-bins.tar.xz (crates/candle/pack-for-gpu.sh):
#   bash docs/results/2026-11-29-hd512-scalar-h200/run.sh
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc
R=$OUT/run.txt; L=/tmp/logs; mkdir -p $L /tmp/cb
X=.carry/xtask
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
tar xJf .carry/candle-bins.tar.xz -C /tmp/cb
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-edge 200 $X verify --kernels scalar --edge-only --seed 29120
job verify-random 200 $X verify --kernels scalar --no-edge --cases 150 --max-seq 400 --seed 29121
job sanitize 200 $X sanitize --pass fwd --kernels scalar --head-dims 512 --logs $L/san
NV=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])")
export LD_LIBRARY_PATH=$(find $NV -name "lib*.so*" -printf "%h\n" | sort -u | tr '\n' ':')${LD_LIBRARY_PATH:-}
timeout 200 /tmp/cb/flash_attn_tests --test-threads 1 > $OUT/flash_attn_tests.txt 2>&1
echo "flash_attn_tests rc=$?" | tee -a $R
grep -E "^test |test result" $OUT/flash_attn_tests.txt | tee -a $R
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify*.log; do
  echo "== $(basename $f .log)" | tee -a $R
  grep -E "passed, .* failed|FAIL|d=512" $f | head -8 | cut -c1-300 | tee -a $R
done
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
(cd /tmp && tar cJf $OUT/logs.tar.xz logs)
echo "(${SECONDS}s)" | tee -a $R
