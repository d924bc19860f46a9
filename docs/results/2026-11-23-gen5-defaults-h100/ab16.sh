# Where the time of the small shape goes: graph-replay time against the number of key tiles per
# CTA (S = 128 .. 1024 at B=1 H=8 D=64: 1 .. 8 tiles of 128 keys, 8 .. 64 q tiles of 128 rows, all
# in one round), both gen-5 paths and the PyTorch peers in the same run; and the graph-replay floor
# of a trivial kernel on this machine.
export FLASHCORE_CACHE_DIR=/tmp/fc PYTHONUNBUFFERED=1; X=.carry/xtask; R=$OUT/ab16.txt
timeout 300 $X bench-all --kernels persistent-hopper,persistent-portable --shape 1,8,128,64 --shape 1,8,256,64 --shape 1,8,512,64 --shape 1,8,1024,64 --causal off --no-gemm --repeats 9 --out-dir $OUT/small > $OUT/small.log 2>&1; echo "bench rc=$?" | tee -a $R
awk -F'|' '$6 ~ /graph|eager/ && $5 !~ /anchor/ {print $2,$5,$6,$7,$11}' $OUT/small/bench-all.md | tee -a $R
python3 - <<'PY' 2>&1 | tee -a $R
import torch
x = torch.zeros(1, device="cuda")
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    for _ in range(3): x.add_(1)
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    for _ in range(100): x.add_(1)
for _ in range(5): g.replay()
torch.cuda.synchronize()
ts = []
for _ in range(20):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); g.replay(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b) * 1000 / 100)
ts.sort(); print(f"trivial kernel (x.add_(1), 1 element) under graph replay: median {ts[10]:.2f} us per kernel, min {ts[0]:.2f}")
PY
