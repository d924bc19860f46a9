#!/usr/bin/env bash
# The Hopper backward's modes build (windows, softcap, ALiBi) and the portable backward's narrow
# varlen routing on the H200, in one call:
# - verify --pass bwd of persistent-hopper (random cases with the modes it claims now, GQA, the
#   backward mode edges; its varlen cases count as skipped) and of persistent-portable (varlen at
#   head dims <= 128 on the 16-row kernels) and persistent-portable-atomic;
# - sanitize --pass bwd of persistent-hopper (its sweep's mode lines run now) and reliability
#   --only backward of it and of persistent-portable;
# - flashcore-candle's GPU tests of the backward and training, and the Python package's GPU tests
#   of the backward with modes (their deterministic=False calls now take the Hopper kernel).
# From the repo root, with .carry/xtask (stripped release xtask of the tree), .carry/cb/gpu.gz
# (flashcore-candle's `gpu` test binary, --features cuda, stripped) and .carry/py/flashcore-*.whl
# (`maturin build --release` of crates/py):
#   bash docs/results/2026-11-30-hopper-bwd-modes-h200/check.sh
# Outputs in $OUT/check: summary.txt, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
O=$OUT/check; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-check; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
A=persistent-portable-atomic; P=persistent-portable; H=persistent-hopper
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-hopper 480 $X verify --pass bwd --kernels $H --cases 400 --seed 4011
job verify-det 480 $X verify --pass bwd --kernels $P --cases 250 --seed 4012
job verify-atomic 400 $X verify --pass bwd --kernels $A --cases 150 --seed 4013
job sanitize 400 $X sanitize --pass bwd --kernels $H --logs $L/san
job reliability 400 $X reliability --kernels $H,$P --only backward --no-huge
NV=$(python3 -c "import nvidia; print(list(nvidia.__path__)[0])" 2>/dev/null)
LIBS=$(find $NV -name "lib*.so*" -printf "%h\n" 2>/dev/null | sort -u | tr '\n' ':')/usr/local/cuda/lib64
(gunzip -c .carry/cb/gpu.gz > /tmp/cb-gpu && chmod +x /tmp/cb-gpu
 LD_LIBRARY_PATH=$LIBS:${LD_LIBRARY_PATH:-} timeout 400 /tmp/cb-gpu backward training > $L/candle.log 2>&1
 echo "candle gpu backward rc=$? (${SECONDS}s)" >> $L/rc.txt) &
(python3 -m pip install -q --no-deps --target /tmp/fc-plain .carry/py/flashcore-*.whl > $L/pip.log 2>&1
 PYTHONPATH=/tmp/fc-plain FLASHCORE_POISON_OUTPUTS=1 timeout -s INT 480 python3 -m pytest -q -n 4 \
   -p no:cacheprovider -rs -k "grad or backward" crates/py/tests/test_gpu.py > $L/pytest.log 2>&1
 echo "pytest backward rc=$? (${SECONDS}s)" >> $L/rc.txt) &
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify-*.log; do
  echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -1)" | tee -a $R
done
grep -hE "^\| (scalar|persistent)" $L/verify-*.log | tee -a $R
grep -hE "FAIL|panicked" $L/verify-*.log | cut -c1-400 | head -12 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
grep -hE "^\| backward \| |^reliability:" $L/reliability.log | cut -c1-260 | tee -a $R
grep -hE "FAIL|panicked" $L/reliability.log | cut -c1-400 | head -8 | tee -a $R
grep -E "^test result|FAILED|panicked" $L/candle.log | cut -c1-300 | head -10 | tee -a $R
tail -3 $L/pytest.log | tee -a $R
grep -E "^(FAILED|ERROR)" $L/pytest.log | cut -c1-300 | head -12 | tee -a $R
(cd /tmp && tar cJf $O/logs.tar.xz logs-check)
echo "done (${SECONDS}s)" | tee -a $R
