"""The varlen backward's time against a dense backward of equal real FLOPs, through flashcore's
Python package (CUDA events, median of 20 calls after 3 warm-ups, the backward alone:
torch.autograd.grad on a kept graph), H = 16, D = 128, bf16.

Rows:
- equal lengths: B sequences of S rows packed, against the dense [B, S, H, D] problem (the same
  bytes, the same FLOPs);
- mixed lengths: sequences of varied lengths, against one dense sequence of the same FLOPs
  (S_dense = round(sqrt(sum L^2))).
Columns, each a backward kernel on one kind of problem:
- varlen: the varlen build of the portable deterministic backward (the only kinds of backward
  that take varlen at D = 128: the Hopper one does not, the atomic one refuses modes at 72-128);
- dense modes: the same kernel's modes build on the dense problem (a window wider than every
  sequence: nothing masked, the modes' code paths run), the varlen build's nearest dense twin;
- dense: the same kernel's dense build (deterministic=True);
- dense fastest: the fastest backward on the dense problem (deterministic=False: the Hopper one).
`python3 varlen_vs_dense.py --warm K` runs configuration K once (K < 8), to compile its kernels in
a process of its own before the timed run.
"""

import math
import sys

import torch

import flashcore._ops as _ops
from flashcore.flash_attn_interface import flash_attn_func, flash_attn_varlen_func

# The backward kernel each call ran (the name `_ops._launch` returns), for the table.
_launch, RAN = _ops._launch, []


def _recording_launch(fn, args, device):
    name = _launch(fn, args, device)
    RAN.append(name)
    return name


_ops._launch = _recording_launch

H, D = 16, 128
dev = torch.device("cuda")
dt = torch.bfloat16
WIDE = 1 << 30  # a window wider than any sequence


def median_ms(fn, reps=20, warm=3):
    # One call first: a kernel far slower than expected is reported, not repeated.
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    if a.elapsed_time(b) > 500:
        return a.elapsed_time(b)
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def bwd_flops(lens, causal):
    # FlashAttention's count: 2.5 forwards, 4·L²·H·D each, halved for causal.
    return sum(2.5 * 4 * L * L * H * D * (0.5 if causal else 1.0) for L in lens)


def grad_fn(o, leaves):
    do = torch.randn_like(o)
    return lambda: torch.autograd.grad(o, leaves, do, retain_graph=True)


def dense(b, s, causal, det, modes):
    q, k, v = (torch.randn(b, s, H, D, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
    window = (WIDE, 0 if causal else WIDE) if modes else (-1, -1)
    o = flash_attn_func(q, k, v, causal=causal, window_size=window, deterministic=det)
    return grad_fn(o, (q, k, v))


def varlen(lens, causal):
    total = sum(lens)
    q, k, v = (torch.randn(total, H, D, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), device=dev, dtype=torch.int32)
    m = max(lens)
    o = flash_attn_varlen_func(q, k, v, cu, cu, m, m, causal=causal, deterministic=True)
    return grad_fn(o, (q, k, v))


rows = [
    ("equal 8x2048", [2048] * 8),
    ("mixed 8 seqs", [4096, 512, 2048, 1024, 3072, 256, 1536, 2560]),
]


def dense_shape(lens):
    if len(set(lens)) == 1:
        return len(lens), lens[0]
    return 1, round(math.sqrt(sum(L * L for L in lens)))


# The kernels' builds: (kind, causal); each compiled by one --warm process.
CONFIGS = [(kind, c) for kind in ("varlen", "modes", "dense", "fastest") for c in (False, True)]


def make(kind, lens, causal):
    b, s = dense_shape(lens)
    if kind == "varlen":
        return varlen(lens, causal)
    return dense(b, s, causal, det=kind != "fastest", modes=kind == "modes")


if len(sys.argv) == 3 and sys.argv[1] == "--warm":
    kind, causal = CONFIGS[int(sys.argv[2])]
    make(kind, [256, 128], causal)()
    torch.cuda.synchronize()
    sys.exit(0)

print(f"H={H} D={D} {dt}, {torch.cuda.get_device_name()}, torch {torch.__version__}")
print("| row | causal | dense shape | varlen ms | dense modes ms | dense ms | dense fastest ms | varlen TFLOP/s | varlen / dense modes | varlen / dense | varlen / dense fastest |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for name, lens in rows:
    for causal in (False, True):
        b, s = dense_shape(lens)
        vf, df = bwd_flops(lens, causal), bwd_flops([s] * b, causal)
        t, ran = {}, {}
        for kind in ("varlen", "modes", "dense", "fastest"):
            t[kind] = median_ms(make(kind, lens, causal))
            ran[kind] = RAN[-1]
            print(f"<!-- {name} causal={int(causal)} {kind}: {t[kind]:.3f} ms, backward kernel {ran[kind]} -->")
        per_flop = {k: (v / (vf if k == "varlen" else df)) for k, v in t.items()}
        r = lambda k: per_flop["varlen"] / per_flop[k]
        print(f"| {name} | {int(causal)} | {b}x{s} | {t['varlen']:.3f} | {t['modes']:.3f} | {t['dense']:.3f} | "
              f"{t['fastest']:.3f} | {vf / t['varlen'] / 1e9:.1f} | {r('modes'):.3f} | {r('dense'):.3f} | {r('fastest'):.3f} |")
        sys.stdout.flush()
