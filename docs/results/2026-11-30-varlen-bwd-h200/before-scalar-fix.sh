#!/usr/bin/env bash
# The varlen backward (and the bindings' backward with modes) on the H200, in one call:
# - verify --pass bwd of the scalar backward and both portable schedules (random cases drawn with
#   every mode each kernel claims, varlen among them, and the backward edges, four of them
#   varlen), and of the Hopper backward, whose varlen and mode cases must count as skipped;
# - sanitize --pass bwd (its sweep now has varlen batches) and reliability --only backward (with
#   the varlen determinism trial);
# - flashcore-candle's GPU tests of the backward (windows, softcap, ALiBi, varlen) and training;
# - the Python package's GPU tests of the backward with modes and of flash_attn_varlen_func's
#   backward (plain wheel: kernels compiled by NVRTC at run time).
# From the repo root, with .carry/xtask (stripped release xtask of the tree), .carry/cb/gpu.gz
# (flashcore-candle's `gpu` test binary, --features cuda, stripped) and .carry/py/flashcore-*.whl
# (`maturin build --release` of crates/py):
#   bash docs/results/2026-11-30-varlen-bwd-h200/before-scalar-fix.sh
# Outputs in $OUT/varlen-bwd: summary.txt, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
O=$OUT/varlen-bwd; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-vbwd; rm -rf $L; mkdir -p $L
S=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
A=persistent-portable-atomic; P=persistent-portable
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-det 500 $X verify --pass bwd --kernels $P --cases 300 --seed 3911
job verify-atomic 500 $X verify --pass bwd --kernels $A --cases 300 --seed 3912
job verify-scalar 500 $X verify --pass bwd --kernels scalar --cases 200 --seed 3913
job verify-hopper 300 $X verify --pass bwd --kernels persistent-hopper --cases 100 --seed 3914
job sanitize 500 $X sanitize --pass bwd --kernels scalar,$P,$A --logs $L/san
job reliability 400 $X reliability --kernels scalar,$P,$A --only backward --no-huge
NV=$(python3 -c "import nvidia; print(list(nvidia.__path__)[0])" 2>/dev/null)
LIBS=$(find $NV -name "lib*.so*" -printf "%h\n" 2>/dev/null | sort -u | tr '\n' ':')/usr/local/cuda/lib64
(gunzip -c .carry/cb/gpu.gz > /tmp/cb-gpu && chmod +x /tmp/cb-gpu
 LD_LIBRARY_PATH=$LIBS:${LD_LIBRARY_PATH:-} timeout 400 /tmp/cb-gpu backward training > $L/candle.log 2>&1
 echo "candle gpu backward rc=$? (${SECONDS}s)" >> $L/rc.txt) &
(python3 -m pip install -q --no-deps --target /tmp/fc-plain .carry/py/flashcore-*.whl > $L/pip.log 2>&1
 PYTHONPATH=/tmp/fc-plain FLASHCORE_POISON_OUTPUTS=1 timeout -s INT 480 python3 -m pytest -q -n 4 \
   -p no:cacheprovider -rs -k "grad_modes or varlen_grad or varlen_packed_grad or deterministic_backward_modes or backward_not_implemented" \
   crates/py/tests/test_gpu.py > $L/pytest.log 2>&1
 echo "pytest backward modes and varlen rc=$? (${SECONDS}s)" >> $L/rc.txt) &
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
(cd /tmp && tar cJf $O/logs.tar.xz logs-vbwd)
echo "done (${SECONDS}s)" | tee -a $R
