#!/usr/bin/env bash
# flash_attn_func's prepared eager path on the H200, in one call: the package's GPU
# tests (FlashAttention's style against a float32 PyTorch reference, every output poisoned with
# NaN first; the prepared path's own tests, torch.compile and CUDA graphs among them) from the
# `aot` wheel (cubins for sm_90a), a subset from the plain wheel (NVRTC at run time), then
# flashcore from Python (plain wheel) beside SDPA's cuDNN and flash backends from the same Python
# (eager and CUDA-graph timings, with the prepared launch and the extension's general forward
# timed alone), the Rust API on the same shapes and layout (bench-all, bshd), and the longest
# row again as Python, Rust, Python.
# From the repo root, with the wheels built from a clean worktree of the commit in .carry/py/
# (`cd crates/py && maturin build --release`, and with `--features aot` and
# FLASHCORE_AOT_ARCHS=sm_90a into .carry/py/aot/) and a release xtask of the same tree in
# .carry/py/xtask:
#   bash docs/results/2026-11-29-python-eager-h200/run.sh
# Outputs in $OUT: python.txt (the summary), bench-python.md, compare.md, aba.md,
# logs-python.tar.xz.
# Runs: first/ (c7d36f2, the prepared path); the top level (2517ade: V's own head dim wired
# through, its tests, the Hopper forward taking it) is the final one, with interleaved.sh after
# it in the same call.
set -u
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
R=$OUT/python.txt; L=/tmp/logs-python; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R
python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)" | tee -a $R
python3 -m pip install -q --no-deps --target /tmp/fc-aot .carry/py/aot/flashcore-*.whl > $L/pip.log 2>&1
echo "pip install --no-deps (aot wheel) rc=$?" | tee -a $R
python3 -m pip install -q --no-deps --target /tmp/fc-plain .carry/py/flashcore-*.whl >> $L/pip.log 2>&1
echo "pip install --no-deps (plain wheel) rc=$?" | tee -a $R
SECONDS=0
# SIGINT on timeout: pytest stops and still prints its summary.
PYTHONPATH=/tmp/fc-aot FLASHCORE_POISON_OUTPUTS=1 timeout -s INT 300 python3 -m pytest -q -n 4 \
    -p no:cacheprovider -rs --junitxml=$L/junit-aot.xml crates/py/tests > $L/pytest-aot.log 2>&1
echo "pytest, aot wheel, all tests rc=$? (${SECONDS}s)" | tee -a $R
tail -3 $L/pytest-aot.log | tee -a $R
grep -E "^(FAILED|ERROR)" $L/pytest-aot.log | cut -c1-300 | head -20 | tee -a $R
grep -E "^SKIPPED" $L/pytest-aot.log | cut -c1-200 | sort | uniq -c | sort -rn | head -8 | tee -a $R
PYTHONPATH=/tmp/fc-plain FLASHCORE_POISON_OUTPUTS=1 timeout -s INT 100 python3 -m pytest -q \
    -p no:cacheprovider -k "test_flash_attn_output and fp16 and plain or cuda_graph or torch_compile or kvcache_decode" \
    crates/py/tests/test_gpu.py > $L/pytest-plain.log 2>&1
echo "pytest, plain wheel (NVRTC), a subset rc=$? (${SECONDS}s)" | tee -a $R
tail -2 $L/pytest-plain.log | tee -a $R
grep -E "^(FAILED|ERROR)" $L/pytest-plain.log | cut -c1-300 | head -10 | tee -a $R
PYTHONPATH=/tmp/fc-plain timeout 150 python3 crates/py/benches/bench.py --breakdown --out $L/pybench > $L/pybench.log 2>&1
echo "bench.py rc=$? (${SECONDS}s)" | tee -a $R
timeout 110 .carry/py/xtask bench-all --shape 1,8,512,64 --shape 4,16,2048,128 --shape 1,16,16384,128 \
    --shape 8,32,4096,128 --layout bshd --kernels persistent-hopper --no-peers --no-gemm \
    --repeats 9 --out-dir $L/rust > $L/rust.log 2>&1
echo "bench-all rc=$? (${SECONDS}s)" | tee -a $R
# The longest rows again, Python then Rust then Python (ABA), for the 2 % comparison.
for i in 1 2; do
  PYTHONPATH=/tmp/fc-plain timeout 60 python3 crates/py/benches/bench.py --shapes 1,16,16384,128 \
      --out $L/aba-py$i > $L/aba-py$i.log 2>&1
  echo "ABA python $i rc=$? (${SECONDS}s)" | tee -a $R
  [ $i = 2 ] && break
  timeout 60 .carry/py/xtask bench-all --shape 1,16,16384,128 --layout bshd --kernels persistent-hopper \
      --no-peers --no-gemm --out-dir $L/aba-rust > $L/aba-rust.log 2>&1
  echo "ABA rust rc=$? (${SECONDS}s)" | tee -a $R
done
python3 - $L/aba-py1/bench-python.json $L/aba-rust/bench-all.json $L/aba-py2/bench-python.json <<'PY' | tee $OUT/aba.md | tee -a $R
import json, sys
def py(p):
    return {r["causal"]: r.get("eager_us") for r in json.load(open(p))["rows"] if r["impl"] == "flashcore"}
def rust(p):
    return {r["shape"]["causal"]: r["outcome"].get("eager_us") for r in json.load(open(p))["rows"]
            if r["source"] == "flashcore"}
a, b, c = py(sys.argv[1]), rust(sys.argv[2]), py(sys.argv[3])
print("(1,16,16384,128) fp16, us per call, in run order: Python, Rust (bench-all), Python\n")
print("| causal | Python 1 | Rust | Python 2 | Python mean / Rust |")
print("|---|---:|---:|---:|---:|")
for k in (False, True):
    m = (a[k] + c[k]) / 2
    print(f"| {'yes' if k else 'no'} | {a[k]:.1f} | {b[k]:.1f} | {c[k]:.1f} | {m / b[k]:.3f} |")
PY
cp $L/pybench/bench-python.md $OUT/ 2>/dev/null
python3 - $L/pybench/bench-python.json $L/rust/bench-all.json > $OUT/compare.md <<'PY'
import json, sys
py = json.load(open(sys.argv[1]))["rows"]
try:
    rust = json.load(open(sys.argv[2]))["rows"]
except Exception as e:
    rust = []
    print(f"(no Rust rows: {e})\n")
rs = {}
for r in rust:
    s, o = r["shape"], r["outcome"]
    if r["source"] == "flashcore" and o.get("kind") == "timed":
        rs[(f"{s['batch']},{s['heads']},{s['seq']},{s['head_dim']}", bool(s["causal"]))] = o
by = {}
for r in py:
    by.setdefault((r["shape"], bool(r["causal"])), {})[r["impl"]] = r
print("flashcore from Python (eager: CUDA events around back-to-back calls; graph: 50 calls a "
      "graph) against SDPA from the same Python and the Rust API (bench-all, bshd) in the same "
      "run; us per call\n")
print("| B,H,S,D | causal | Python eager | Python graph | SDPA cuDNN eager | SDPA cuDNN graph "
      "| SDPA flash eager | Rust eager | Rust graph | Python/Rust eager | Python/Rust graph |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
f = lambda x: "-" if x is None else f"{x:.2f}"
ratio = lambda a, b: "-" if a is None or b is None else f"{a / b:.3f}"
for k, impls in by.items():
    p, c, fl = impls.get("flashcore", {}), impls.get("sdpa-cudnn", {}), impls.get("sdpa-flash", {})
    r = rs.get(k, {})
    print(f"| {k[0]} | {'yes' if k[1] else 'no'} | {f(p.get('eager_us'))} | {f(p.get('graph_us'))} "
          f"| {f(c.get('eager_us'))} | {f(c.get('graph_us'))} | {f(fl.get('eager_us'))} "
          f"| {f(r.get('eager_us'))} | {f(r.get('graph_us'))} "
          f"| {ratio(p.get('eager_us'), r.get('eager_us'))} | {ratio(p.get('graph_us'), r.get('graph_us'))} |")
PY
cat $OUT/compare.md | tee -a $R
tar -C /tmp -cJf $OUT/logs-python.tar.xz logs-python 2>/dev/null
echo "done (${SECONDS}s)" | tee -a $R
