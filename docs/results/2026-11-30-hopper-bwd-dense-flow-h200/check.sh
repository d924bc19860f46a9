#!/usr/bin/env bash
# The Hopper backward's modes builds without softcap in the dense step flow (P under dPᵀ, 128-row
# steps at D = 64; FC_BWD_SOFTCAP builds keep the one-pass step), in one call:
# - verify --pass bwd --cases 1000 of persistent-hopper (every mode it claims drawn), and the
#   softcap case that failed at ratio 1.07 on 2026-11-30 (triage-softcap-case.txt beside the
#   modes results);
# - sanitize --pass bwd and reliability --only backward of persistent-hopper;
# - flashcore-candle's GPU tests of the backward and training, the Python package's GPU tests of
#   the backward;
# - then, alone on the GPU: the candle training example (train_packed: a small decoder on packed
#   varlen batches with a sliding window, its first steps' gradients against candle's attention,
#   steps/s of both), and modes_vs_dense.py (the modes results' script: each mode against a dense
#   backward of equal work, same kernel, same run).
# From the repo root, with .carry/xtask, .carry/cb/gpu.gz, .carry/ex/train_packed.gz and
# .carry/py/flashcore-*.whl built from the tree:
#   bash docs/results/2026-11-30-hopper-bwd-dense-flow-h200/check.sh
# Outputs in $OUT/check: summary.txt, modes-vs-dense.md, train.log, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
O=$OUT/check; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-check; rm -rf $L; mkdir -p $L
B=docs/results/2026-11-30-hopper-bwd-modes-h200/modes_vs_dense.py
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
H=persistent-hopper
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-1000 330 $X verify --pass bwd --kernels $H --cases 1000 --seed 4051
job verify-softcap-case 60 $X verify --pass bwd --kernels $H --no-shrink \
  --case 'b=4,hq=1,hkv=1,sq=280,sk=512,d=64,dtype=bf16,causal=0,layout=bhsd,seed=6881284390085389163,varlen=1,wl=1,softcap=30,alibi=head'
job verify-uncapped-case 60 $X verify --pass bwd --kernels $H --no-shrink \
  --case 'b=4,hq=1,hkv=1,sq=280,sk=512,d=64,dtype=bf16,causal=0,layout=bhsd,seed=6881284390085389163,varlen=1,wl=1,alibi=head'
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
gunzip -c .carry/ex/train_packed.gz > /tmp/train_packed && chmod +x /tmp/train_packed
wait
sort $L/rc.txt | grep -v "^warm" | tee -a $R
echo "warm: $(grep -c 'rc=0' <(grep '^warm' $L/rc.txt)) of 18 rc=0" | tee -a $R
for f in $L/verify-*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed|PASS|FAIL' $f | tail -1 | cut -c1-300)" | tee -a $R; done
grep -hE "FAIL|panicked" $L/verify-1000.log | cut -c1-400 | head -12 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
grep -hE "^\| backward \| |^reliability:" $L/reliability.log | cut -c1-200 | tee -a $R
grep -hE "FAIL|panicked" $L/reliability.log | cut -c1-400 | head -8 | tee -a $R
grep -E "^test result|FAILED|panicked" $L/candle.log | cut -c1-300 | head -10 | tee -a $R
tail -2 $L/pytest.log | tee -a $R
grep -E "^(FAILED|ERROR)" $L/pytest.log | cut -c1-300 | head -12 | tee -a $R
(cd /tmp && tar cJf $O/logs.tar.xz logs-check)
LD_LIBRARY_PATH=$LIBS:${LD_LIBRARY_PATH:-} timeout 150 /tmp/train_packed > $O/train.log 2>&1
echo "train_packed rc=$? (${SECONDS}s)" | tee -a $R
LEFT=$((590 - SECONDS))
PYTHONPATH=/tmp/fc-plain timeout $LEFT python3 $B > $O/modes-vs-dense.md 2> $O/bench.err
echo "modes_vs_dense rc=$? (${SECONDS}s)" | tee -a $R
tail -3 $O/bench.err | tee -a $R
tail -14 $O/train.log | tee -a $R
