#!/usr/bin/env bash
# Large shapes, flashcore from Python (the prepared eager path) against the Rust API, interleaved:
# Python, Rust, Python, Rust, Python, Rust at each shape, fp16, bshd, then the medians. Separate
# processes in turns, so a drift of the GPU's state over the run hits both sides alike.
# From the repo root, with .carry/py as for run.sh (plain wheel, release xtask):
#   bash docs/results/2026-11-29-python-eager-h200/interleaved.sh
# Output in $OUT: interleaved.md (and interleaved-logs.tar.xz).
set -u
L=/tmp/logs-interleaved; rm -rf $L; mkdir -p $L
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1
[ -d /tmp/fc-plain ] || python3 -m pip install -q --no-deps --target /tmp/fc-plain .carry/py/flashcore-*.whl > $L/pip.log 2>&1
SECONDS=0
for shape in 1,16,16384,128 8,32,4096,128; do
  for i in 1 2 3; do
    PYTHONPATH=/tmp/fc-plain timeout 60 python3 crates/py/benches/bench.py --shapes $shape \
        --impls flashcore --repeats 9 --out $L/$shape-py$i > $L/$shape-py$i.log 2>&1
    echo "$shape python $i rc=$? (${SECONDS}s)"
    timeout 60 .carry/py/xtask bench-all --shape $shape --layout bshd --kernels persistent-hopper \
        --no-peers --no-gemm --repeats 9 --out-dir $L/$shape-rust$i > $L/$shape-rust$i.log 2>&1
    echo "$shape rust $i rc=$? (${SECONDS}s)"
  done
done
python3 - $L <<'PY' | tee $OUT/interleaved.md
import glob, json, statistics, sys
L = sys.argv[1]
print("flashcore from Python (flash_attn_func, prepared eager path) against the Rust API "
      "(bench-all), fp16 bshd, us per call; three runs of each, taken in turns\n")
print("| B,H,S,D | causal | Python runs | Rust runs | Python median / Rust median |")
print("|---|---|---|---|---:|")
for shape in ("1,16,16384,128", "8,32,4096,128"):
    py, rs = {False: [], True: []}, {False: [], True: []}
    for p in sorted(glob.glob(f"{L}/{shape}-py*/bench-python.json")):
        for r in json.load(open(p))["rows"]:
            if r["impl"] == "flashcore" and "eager_us" in r:
                py[r["causal"]].append(r["eager_us"])
    for p in sorted(glob.glob(f"{L}/{shape}-rust*/bench-all.json")):
        for r in json.load(open(p))["rows"]:
            o = r["outcome"]
            if r["source"] == "flashcore" and o.get("kind") == "timed":
                rs[bool(r["shape"]["causal"])].append(o["eager_us"])
    for c in (False, True):
        a, b = py[c], rs[c]
        ratio = f"{statistics.median(a) / statistics.median(b):.3f}" if a and b else "-"
        print(f"| {shape} | {'yes' if c else 'no'} | {', '.join(f'{x:.1f}' for x in a)} "
              f"| {', '.join(f'{x:.1f}' for x in b)} | {ratio} |")
PY
tar -C /tmp -cJf $OUT/interleaved-logs.tar.xz logs-interleaved 2>/dev/null
