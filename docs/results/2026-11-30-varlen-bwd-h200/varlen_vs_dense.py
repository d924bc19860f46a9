"""The varlen backward's time against a dense backward of equal real FLOPs, through flashcore's
Python package (CUDA events, median of 20 calls after 3 warm-ups, the backward alone:
torch.autograd.grad on a kept graph).

Rows:
- equal lengths: B sequences of S rows packed, against the dense [B, S, H, D] problem (the same
  bytes, the same FLOPs);
- mixed lengths: sequences of varied lengths, against one dense sequence whose causal (or full)
  FLOPs are the same sum (S_dense = round(sqrt(sum L^2))).
Each row runs with deterministic=False (the fastest backward that takes the problem: the Hopper
backward takes dense problems, not varlen ones) and deterministic=True (the portable
deterministic backward for both), so the ratio of the second is the varlen cost on one kernel.
"""

import math
import sys

import torch

from flashcore.flash_attn_interface import flash_attn_func, flash_attn_varlen_func

H, D = 16, 128
dev = torch.device("cuda")
dt = torch.bfloat16


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


def bwd_flops(lens, causal):
    # FlashAttention's count: 2.5 forwards, 4·L²·H·D each, halved for causal.
    return sum(2.5 * 4 * L * L * H * D * (0.5 if causal else 1.0) for L in lens)


def time_dense(b, s, causal, det):
    q, k, v = (torch.randn(b, s, H, D, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
    o = flash_attn_func(q, k, v, causal=causal, deterministic=det)
    do = torch.randn_like(o)
    return median_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))


def time_varlen(lens, causal, det):
    total = sum(lens)
    q, k, v = (torch.randn(total, H, D, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), device=dev, dtype=torch.int32)
    m = max(lens)
    o = flash_attn_varlen_func(q, k, v, cu, cu, m, m, causal=causal, deterministic=det)
    do = torch.randn_like(o)
    return median_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))


rows = [
    ("equal 8x2048", [2048] * 8, (8, 2048)),
    ("equal 4x4096", [4096] * 4, (4, 4096)),
    ("mixed 8 seqs", [4096, 512, 2048, 1024, 3072, 256, 1536, 2560], None),
    ("mixed 16 seqs", [1000, 3000, 17, 2048, 555, 4096, 1, 700, 1300, 2222, 64, 900, 3500, 128, 1800, 2600], None),
]
print(f"H={H} D={D} {dt}, {torch.cuda.get_device_name()}, torch {torch.__version__}")
print("| row | causal | deterministic | varlen ms | dense ms (shape) | varlen TFLOP/s | dense TFLOP/s | varlen / dense time per FLOP |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for name, lens, dense in rows:
    for causal in (False, True):
        for det in (False, True):
            vf = bwd_flops(lens, causal)
            if dense is None:
                s = round(math.sqrt(sum(L * L for L in lens)))
                dense = (1, s)
            df = bwd_flops([dense[1]] * dense[0], causal)
            tv = time_varlen(lens, causal, det)
            td = time_dense(dense[0], dense[1], causal, det)
            ratio = (tv / vf) / (td / df)
            print(f"| {name} | {int(causal)} | {int(det)} | {tv:.3f} | {td:.3f} ({dense[0]}x{dense[1]}) | "
                  f"{vf / tv / 1e9:.1f} | {df / td / 1e9:.1f} | {ratio:.3f} |")
            sys.stdout.flush()
