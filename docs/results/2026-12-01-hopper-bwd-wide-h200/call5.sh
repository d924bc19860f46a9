#!/usr/bin/env bash
# The wide builds' backward beside FlashAttention 3's (flash-attn3-jax 0.2.3, jitted jax.grad of
# sum(O·dO) minus the jitted forward, with its gradient check) and SDPA's backends in one run, on
# nvidia-h200: (4,16,2048,192), (4,16,2048,256) and (1,16,8192,256), fp16, causal and not.
# From the repo root with .carry/xtask (29b80e2) and the wheels in .carry/fa3. Outputs in $OUT:
# call5.txt, bench-bwd-fa3.md, logs-call5.tar.xz.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
X=.carry/xtask; R=$OUT/call5.txt; L=/tmp/logs-call5; rm -rf $L; mkdir -p $L
SECONDS=0
python3 -m pip install -q --no-deps --target /tmp/fa3pkg .carry/fa3/*.whl > $L/pip.log 2>&1
echo "pip rc=$?" | tee $R
S="--shape 4,16,2048,192 --shape 4,16,2048,256 --shape 1,16,8192,256"
timeout 240 $X bench-all --pass bwd --kernels persistent-hopper $S --fa3-path /tmp/fa3pkg --out-dir $L/bench > $L/bench.log 2>&1
echo "bench-all bwd rc=$? (${SECONDS}s)" | tee -a $R
cp $L/bench/bench-bwd.md $OUT/bench-bwd-fa3.md 2>/dev/null
grep -iE "fa3|jax" $L/bench.log | head -5 | cut -c1-300 | tee -a $R
grep -E "^\| (4|1),16,[0-9]+,(192|256) \| f16 \| (no|yes) \| [a-z_0-9-]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+" $OUT/bench-bwd-fa3.md | head -6 | tee -a $R
grep -E "fa3" $OUT/bench-bwd-fa3.md | cut -c1-260 | head -8 | tee -a $R
(cd /tmp && tar cJf $OUT/logs-call5.tar.xz logs-call5)
