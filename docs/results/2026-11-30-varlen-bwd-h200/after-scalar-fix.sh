#!/usr/bin/env bash
# After the scalar fix (66e8183), in one call:
# - the varlen backward against a dense one of equal real FLOPs (varlen_vs_dense.py, alone on the
#   GPU, through the Python package);
# - verify --pass bwd of the scalar backward (the seed that failed before the fix) and of both
#   portable schedules on new seeds; sanitize --pass bwd of the scalar backward.
# From the repo root, with .carry/xtask and .carry/py/flashcore-*.whl as for before-scalar-fix.sh:
#   bash docs/results/2026-11-30-varlen-bwd-h200/after-scalar-fix.sh
# Outputs in $OUT/varlen-bwd2: summary.txt, varlen-vs-dense.md, logs.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
O=$OUT/varlen-bwd2; mkdir -p $O
X=.carry/xtask; R=$O/summary.txt; L=/tmp/logs-vbwd2; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
python3 -m pip install -q --no-deps --target /tmp/fc-plain .carry/py/flashcore-*.whl > $L/pip.log 2>&1
PYTHONPATH=/tmp/fc-plain timeout 200 python3 docs/results/2026-11-30-varlen-bwd-h200/varlen_vs_dense.py \
  > $O/varlen-vs-dense.md 2> $L/bench.err
echo "varlen_vs_dense rc=$? (${SECONDS}s)" | tee -a $R
A=persistent-portable-atomic; P=persistent-portable
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-scalar 380 $X verify --pass bwd --kernels scalar --cases 200 --seed 3913
job verify-det 380 $X verify --pass bwd --kernels $P --cases 350 --seed 3921
job verify-atomic 380 $X verify --pass bwd --kernels $A --cases 350 --seed 3922
job sanitize 380 $X sanitize --pass bwd --kernels scalar --logs $L/san
wait
sort $L/rc.txt | tee -a $R
for f in $L/verify-*.log; do
  echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -1)" | tee -a $R
done
grep -hE "^\| (scalar|persistent)" $L/verify-*.log | tee -a $R
grep -hE "FAIL|panicked" $L/verify-*.log | cut -c1-400 | head -12 | tee -a $R
grep -hE "^\| (memcheck|racecheck|synccheck|initcheck|tool)|sanitize:" $L/sanitize.log | tee -a $R
tail -5 $L/bench.err | tee -a $R
cat $O/varlen-vs-dense.md | tee -a $R
(cd /tmp && tar cJf $O/logs.tar.xz logs-vbwd2)
echo "done (${SECONDS}s)" | tee -a $R
