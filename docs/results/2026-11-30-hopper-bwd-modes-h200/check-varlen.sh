#!/usr/bin/env bash
# The Hopper backward with varlen too (FC_BWD_VARLEN), then its speed with modes, in one call:
# - verify --pass bwd of persistent-hopper (random cases with every mode it claims: windows,
#   softcap, ALiBi, varlen; GQA; the backward mode edges, four of them varlen);
# - sanitize --pass bwd and reliability --only backward of persistent-hopper;
# - flashcore-candle's GPU tests of the backward and training, and the Python package's GPU tests
#   of the backward (their deterministic=False calls take the Hopper kernel, varlen included);
# - then, alone on the GPU, modes_vs_dense.py (each configuration's kernels compiled first by
#   processes of their own).
# From the repo root, with .carry/xtask, .carry/cb/gpu.gz and .carry/py/flashcore-*.whl built from
# the tree (see check.sh):
#   bash docs/results/2026-11-30-hopper-bwd-modes-h200/check-varlen.sh
# Outputs in $OUT/check-varlen: summary.txt, modes-vs-dense.md, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
O=$OUT/check-varlen; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-check-varlen; rm -rf $L; mkdir -p $L
B=docs/results/2026-11-30-hopper-bwd-modes-h200/modes_vs_dense.py
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-hopper 300 $X verify --pass bwd --kernels $H --cases 600 --seed 4021
# The case that faulted before empty units skipped their K/V load (one sequence, no keys).
job verify-empty-k 60 $X verify --pass bwd --kernels $H --no-shrink \
  --case 'b=1,hq=11,hkv=11,sq=512,sk=82,d=64,dtype=bf16,causal=1,layout=bshd,seed=3771092085535322422,varlen=1,alibi=batch'
job sanitize 240 $X sanitize --pass bwd --kernels $H --logs $L/san
job reliability 240 $X reliability --kernels $H --only backward --no-huge
NV=$(python3 -c "import nvidia; print(list(nvidia.__path__)[0])" 2>/dev/null)
LIBS=$(find $NV -name "lib*.so*" -printf "%h\n" 2>/dev/null | sort -u | tr '\n' ':')/usr/local/cuda/lib64
(gunzip -c .carry/cb/gpu.gz > /tmp/cb-gpu && chmod +x /tmp/cb-gpu
 LD_LIBRARY_PATH=$LIBS:${LD_LIBRARY_PATH:-} timeout 240 /tmp/cb-gpu backward training > $L/candle.log 2>&1
 echo "candle gpu backward rc=$? (${SECONDS}s)" >> $L/rc.txt) &
python3 -m pip install -q --no-deps --target /tmp/fc-plain .carry/py/flashcore-*.whl > $L/pip.log 2>&1
(PYTHONPATH=/tmp/fc-plain FLASHCORE_POISON_OUTPUTS=1 timeout -s INT 240 python3 -m pytest -q -n 4 \
   -p no:cacheprovider -rs -k "grad or backward" crates/py/tests/test_gpu.py > $L/pytest.log 2>&1
 echo "pytest backward rc=$? (${SECONDS}s)" >> $L/rc.txt) &
for k in $(seq 0 17); do
  (PYTHONPATH=/tmp/fc-plain timeout 120 python3 $B --warm $k > $L/warm-$k.log 2>&1; echo "warm $k rc=$? (${SECONDS}s)" >> $L/rc.txt) &
  if [ $((k % 6)) = 5 ]; then sleep 20; fi
done
wait
sort $L/rc.txt | grep -v "^warm" | tee -a $R
echo "warm: $(grep -c 'rc=0' <(grep '^warm' $L/rc.txt)) of 18 rc=0" | tee -a $R
for f in $L/verify-*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -1)" | tee -a $R; done
grep -hE "FAIL|panicked" $L/verify-*.log | cut -c1-400 | head -12 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
grep -hE "^\| backward \| |^reliability:" $L/reliability.log | cut -c1-200 | tee -a $R
grep -hE "FAIL|panicked" $L/reliability.log | cut -c1-400 | head -8 | tee -a $R
grep -E "^test result|FAILED|panicked" $L/candle.log | cut -c1-300 | head -10 | tee -a $R
tail -2 $L/pytest.log | tee -a $R
grep -E "^(FAILED|ERROR)" $L/pytest.log | cut -c1-300 | head -12 | tee -a $R
(cd /tmp && tar cJf $O/logs.tar.xz logs-check-varlen)
LEFT=$((585 - SECONDS))
PYTHONPATH=/tmp/fc-plain timeout $LEFT python3 $B > $O/modes-vs-dense.md 2> $O/bench.err
echo "modes_vs_dense rc=$? (${SECONDS}s)" | tee -a $R
tail -3 $O/bench.err | tee -a $R
cat $O/modes-vs-dense.md
