"""What D = rowsum(P ∘ dP) for short rows costs the backward: flashcore's backward alone
(torch.autograd.grad on a kept graph, CUDA events, median of 20 calls after 3 warm-ups), bf16,
H = 16, D = 128, deterministic=False (the fastest backward that takes the problem; the kernel that
ran is printed). Run it once with FLASHCORE_BWD_SHORT_ROW_KEYS=0 (every row's D from the stored O,
the backward before this change) and once unset (rows of at most 32 keys recompute theirs), each
in a process of its own; `--warm` runs every problem once to compile its kernels.

Rows: one 16384-row sequence with a causal sliding window of W keys (window_size=(W, 0)) for W = 1,
8, 32 (every row short) and 128 (only the first rows); and dense (4, 2048) causal and not (the first
32 rows of each causal sequence short).
"""

import os
import sys

import torch

import flashcore._ops as _ops
from flashcore.flash_attn_interface import flash_attn_func

_launch, RAN = _ops._launch, []


def _recording_launch(fn, args, device):
    name = _launch(fn, args, device)
    RAN.append(name)
    return name


_ops._launch = _recording_launch
H, D = 16, 128
dev, dt = torch.device("cuda"), torch.bfloat16


def median_ms(fn, reps=20, warm=3):
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


def backward_of(b, s, causal=False, window=(-1, -1)):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, s, H, D, device=dev, dtype=dt, generator=g).requires_grad_() for _ in range(3))
    o = flash_attn_func(q, k, v, causal=causal, window_size=window, deterministic=False)
    do = torch.randn(o.shape, device=dev, dtype=dt, generator=g)
    return lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)


ROWS = [(f"window {w}, 1x16384", lambda w=w: backward_of(1, 16384, window=(w, 0))) for w in (1, 8, 32, 128)]
ROWS += [(f"dense 4x2048 causal={int(c)}", lambda c=c: backward_of(4, 2048, causal=c)) for c in (False, True)]

label = os.environ.get("FLASHCORE_BWD_SHORT_ROW_KEYS", "default (32)")
for name, make in ROWS:
    fn = make()
    if len(sys.argv) > 1 and sys.argv[1] == "--warm":
        fn()
        torch.cuda.synchronize()
        continue
    ms = median_ms(fn)
    print(f"| {name} | {label} | {ms:.4f} | {RAN[-1]} |", flush=True)
