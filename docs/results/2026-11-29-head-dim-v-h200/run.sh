#!/usr/bin/env bash
# V's own head dim (Q and K at 192, V and O at 128, DeepSeek-V2/V3 prefill) on the H200, in one
# call:
# - verify of the generation-5 forwards (persistent picks its path; persistent-portable and
#   persistent-hopper alone), 1000 random cases each, a fifth of the dense cases with a V dim of
#   their own, and the (192, 128) edge cases; the other kernels' V-dim cases count as skipped;
# - the Python package's V-dim tests (plain wheel);
# - compute-sanitizer memcheck and racecheck over single (192, 128) verify cases (the sanitize
#   sweep has none);
# - prefill at (192, 128) from Python (flash_attn_func, plain wheel) beside SDPA's cuDNN and
#   efficient backends from the same Python, and the equal-dims rows at 192 and 128 for scale.
# From the repo root, with a stripped release xtask of the tree and the plain wheel in .carry/py/:
#   bash docs/results/2026-11-29-head-dim-v-h200/run.sh
# - the Hopper plan's key tile at (192, 128): 128 (default) and 112, in turns.
# Outputs in $OUT/head-dim-v: dv.txt (the summary), bench-python.md, tiles.md, logs-dv.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
O=$OUT/head-dim-v; mkdir -p $O
X=.carry/py/xtask; R=$O/dv.txt; L=/tmp/logs-dv; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
SECONDS=0
S=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
job() { # label timeout cmd...
  local label=$1 t=$2; shift 2
  (timeout $t "$@" > $L/$label.log 2>&1; echo "$label rc=$? (${SECONDS}s)" >> $L/rc.txt) &
}
job verify-persistent 300 $X verify --kernels persistent --cases 1000 --seed 3701
job verify-portable 300 $X verify --kernels persistent-portable --cases 1000 --seed 3702
job verify-hopper 300 $X verify --kernels persistent-hopper --cases 1000 --seed 3703
(
  for c in "b=2,hq=16,hkv=16,sq=512,sk=512,d=192,dv=128,dtype=bf16,causal=1,layout=bshd,seed=7008" \
           "b=3,hq=12,hkv=4,sq=203,sk=377,d=192,dv=128,dtype=f16,causal=0,layout=bshd,seed=7009"; do
    for tool in memcheck racecheck; do
      for k in persistent-portable persistent-hopper; do
        timeout 200 $S --tool $tool --error-exitcode 9 $X verify --kernels $k \
            --case "$c" >> $L/sanitize-$tool.log 2>&1
        echo "sanitize $tool $k $c rc=$?" >> $L/sanitize-rc.txt
      done
    done
  done
  echo "sanitize rc=0 (${SECONDS}s)" >> $L/rc.txt
) &
python3 -m pip install -q --no-deps --target /tmp/fc-plain .carry/py/flashcore-*.whl > $L/pip.log 2>&1
wait
# The package's V-dim tests (dense and varlen through both eager paths, the backward's refusal).
PYTHONPATH=/tmp/fc-plain FLASHCORE_POISON_OUTPUTS=1 timeout -s INT 200 python3 -m pytest -q -n 4 \
    -p no:cacheprovider -k head_dim_v crates/py/tests > $L/pytest.log 2>&1
echo "pytest -k head_dim_v rc=$? (${SECONDS}s): $(tail -1 $L/pytest.log)" | tee -a $R
grep -E "^(FAILED|ERROR)" $L/pytest.log | cut -c1-300 | head -10 | tee -a $R
sort $L/rc.txt | tee -a $R
for f in $L/verify-*.log; do echo "$(basename $f .log): $(grep -E 'passed, .* failed' $f | tail -3 | tr '\n' ' ')" | tee -a $R; done
grep -hE "FAIL|panicked" $L/verify-*.log | cut -c1-400 | head -12 | tee -a $R
echo "dv cases seen: $(grep -hc 'dv=' $L/verify-*.log | paste -sd' ')" | tee -a $R
cat $L/sanitize-rc.txt | tee -a $R
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" $L/sanitize-*.log | sort | uniq -c | tee -a $R
PYTHONPATH=/tmp/fc-plain timeout 200 python3 crates/py/benches/bench.py --dtype bf16 \
    --shapes 4,16,2048,192,128 1,16,16384,192,128 4,16,2048,192 4,16,2048,128 \
    --impls flashcore sdpa-cudnn sdpa-efficient sdpa-flash --out $L/bench > $L/bench.log 2>&1
echo "bench rc=$? (${SECONDS}s)" | tee -a $R
cp $L/bench/bench-python.md $O/ 2>/dev/null
grep -E "^\| " $L/bench/bench-python.md | tee -a $R
# The Hopper plan's key tile at (192, 128): FA3's 128 keys (the default) against the equal-dims
# 192 build's 112, in turns (128, 112, 128).
for t in 128a 112 128b; do
  n=${t%[ab]}
  FLASHCORE_HOPPER_BLOCK_N=$n PYTHONPATH=/tmp/fc-plain timeout 60 python3 crates/py/benches/bench.py \
      --dtype bf16 --shapes 4,16,2048,192,128 1,16,16384,192,128 --impls flashcore \
      --out $L/tile-$t > $L/tile-$t.log 2>&1
  echo "tile $t rc=$? (${SECONDS}s)" | tee -a $R
  grep -E "^\| [0-9]" $L/tile-$t/bench-python.md | sed "s/^/block_n=$n /" | tee -a $O/tiles.md | tee -a $R
done
(cd /tmp && tar cJf $O/logs-dv.tar.xz logs-dv)
echo "done (${SECONDS}s)" | tee -a $R
