#!/usr/bin/env bash
# The varlen backward against dense backwards of equal real FLOPs (varlen_vs_dense.py), alone on
# the GPU: each configuration's kernels compiled first by processes of their own (the plain
# wheel compiles with NVRTC at run time; the first timing call took the compile in its 200 s
# limit), then the timed run.
# From the repo root, with .carry/py/flashcore-*.whl as for before-scalar-fix.sh:
#   bash docs/results/2026-11-30-varlen-bwd-h200/before-counter-fix.sh
# Outputs in $OUT/varlen-bwd3: varlen-vs-dense.md, summary.txt.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
O=$OUT/varlen-bwd3; mkdir -p $O; R=$O/summary.txt
B=docs/results/2026-11-30-varlen-bwd-h200/varlen_vs_dense.py
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
python3 -m pip install -q --no-deps --target /tmp/fc-plain .carry/py/flashcore-*.whl > $O/pip.log 2>&1
for k in 0 1 2 3 4 5 6 7; do
  (PYTHONPATH=/tmp/fc-plain timeout 300 python3 $B --warm $k > $O/warm-$k.log 2>&1; echo "warm $k rc=$? (${SECONDS}s)" >> $O/warm.txt) &
done
wait
sort $O/warm.txt | tee -a $R
PYTHONPATH=/tmp/fc-plain timeout 240 python3 $B > $O/varlen-vs-dense.md 2> $O/bench.err
echo "varlen_vs_dense rc=$? (${SECONDS}s)" | tee -a $R
tail -3 $O/bench.err | tee -a $R
cat $O/varlen-vs-dense.md | tee -a $R
