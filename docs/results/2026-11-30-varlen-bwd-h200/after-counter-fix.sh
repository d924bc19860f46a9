#!/usr/bin/env bash
# After the lent workspace's counters fix (a forward after a backward on one stream), in one call:
# the Python GPU test of forwards after backwards, then varlen_vs_dense.py (each configuration's
# kernels compiled first by processes of their own, then the timed run, alone on the GPU).
# From the repo root, with .carry/py/flashcore-*.whl built from the tree:
#   bash docs/results/2026-11-30-varlen-bwd-h200/after-counter-fix.sh
# Outputs in $OUT/varlen-bwd4: summary.txt, varlen-vs-dense.md.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
O=$OUT/varlen-bwd4; mkdir -p $O; R=$O/summary.txt
B=docs/results/2026-11-30-varlen-bwd-h200/varlen_vs_dense.py
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
python3 -m pip install -q --no-deps --target /tmp/fc-plain .carry/py/flashcore-*.whl > $O/pip.log 2>&1
(PYTHONPATH=/tmp/fc-plain FLASHCORE_POISON_OUTPUTS=1 timeout -s INT 90 python3 -m pytest -q -p no:cacheprovider \
   -k "forward_after_backward" crates/py/tests/test_gpu.py > $O/pytest.log 2>&1
 echo "pytest forward_after_backward rc=$? (${SECONDS}s)" >> $O/rc.txt) &
for k in 0 1 2 3 4 5 6 7; do
  (PYTHONPATH=/tmp/fc-plain timeout 60 python3 $B --warm $k > /dev/null 2>&1; echo "warm $k rc=$? (${SECONDS}s)" >> $O/rc.txt) &
done
wait
sort $O/rc.txt | tee -a $R
tail -3 $O/pytest.log | tee -a $R
grep -E "^(FAILED|ERROR)|Error" $O/pytest.log | cut -c1-300 | head -6 | tee -a $R
PYTHONPATH=/tmp/fc-plain timeout 70 python3 $B > $O/varlen-vs-dense.md 2> $O/bench.err
echo "varlen_vs_dense rc=$? (${SECONDS}s)" | tee -a $R
tail -3 $O/bench.err | tee -a $R
cat $O/varlen-vs-dense.md | tee -a $R
