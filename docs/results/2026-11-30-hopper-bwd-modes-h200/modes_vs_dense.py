"""The backward with a window, softcap or ALiBi against a dense backward, through flashcore's Python
package (CUDA events, median of 20 calls after 3 warm-ups, the backward alone: torch.autograd.grad
on a kept graph), H = 16, bf16, deterministic=False (the fastest backward that takes the problem;
the kernel that ran is printed beside each time).

Rows:
- window: one sequence of S rows with a causal sliding window of W keys (window_size=(W, 0)), against
  dense problems with the same visible (query, key) pairs: non-causal of S_d = sqrt(pairs) rows, and
  causal of S_c = sqrt(2 pairs) rows. The ratio is time per visible pair, windowed over dense.
- softcap / ALiBi: the same shape with and without the mode (softcap 30; ALiBi slopes per head).
- varlen: sequences packed (flash_attn_varlen_func) against a dense problem of equal real FLOPs:
  B sequences of S rows against the dense [B, S, H, D] problem, and sequences of mixed lengths
  against one dense sequence of S_dense = round(sqrt(sum L^2)) rows; the ratio is time per FLOP,
  varlen over dense.
`python3 modes_vs_dense.py --warm K` runs configuration K once, to compile its kernels in a process of
its own before the timed run.
"""

import math
import sys

import torch

import flashcore._ops as _ops
from flashcore.flash_attn_interface import flash_attn_func, flash_attn_varlen_func

_launch, RAN = _ops._launch, []


def _recording_launch(fn, args, device):
    name = _launch(fn, args, device)
    RAN.append(name)
    return name


_ops._launch = _recording_launch

H = 16
dev = torch.device("cuda")
dt = torch.bfloat16


def median_ms(fn, reps=20, warm=3):
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


def backward_of(b, s, d, causal=False, window=(-1, -1), softcap=0.0, alibi=False):
    q, k, v = (torch.randn(b, s, H, d, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
    slopes = None
    if alibi:
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device=dev, dtype=torch.float32)
    o = flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap, alibi_slopes=slopes,
                        deterministic=False)
    do = torch.randn_like(o)
    return lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)


def varlen_backward_of(lens, d, causal):
    total = sum(lens)
    q, k, v = (torch.randn(total, H, d, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), device=dev, dtype=torch.int32)
    o = flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=causal, deterministic=False)
    do = torch.randn_like(o)
    return lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)


VARLEN_ROWS = [("equal 8x2048", [2048] * 8), ("mixed 8 seqs", [4096, 512, 2048, 1024, 3072, 256, 1536, 2560])]


def dense_twin(lens):
    if len(set(lens)) == 1:
        return len(lens), lens[0]
    return 1, round(math.sqrt(sum(L * L for L in lens)))


def window_pairs(s, w):
    # Row i sees keys [max(0, i - w), i]: min(i, w) + 1 of them.
    return sum(min(i, w) + 1 for i in range(s)) if s < 100000 else (w + 1) * s - w * (w + 1) // 2


# (name, d, window rows) and (name, d, mode rows); the builds each --warm process compiles.
WINDOWS = [(d, s, w) for d in (64, 128) for (s, w) in ((16384, 1024), (16384, 4096), (8192, 2048))]
MODE_ROWS = [(d, b, s, causal, mode) for d in (64, 128) for (b, s) in ((4, 2048), (1, 16384))
             for causal in (False, True) for mode in ("softcap", "alibi")]


def make_window(d, s, w, kind):
    pairs = window_pairs(s, w)
    if kind == "window":
        return backward_of(1, s, d, window=(w, 0))
    if kind == "dense":
        return backward_of(1, round(math.sqrt(pairs)), d)
    return backward_of(1, round(math.sqrt(2 * pairs)), d, causal=True)


WARM = [(d, kind) for d in (64, 128) for kind in ("window", "dense", "causal", "softcap", "alibi",
                                                    "softcap-causal", "alibi-causal", "varlen", "varlen-causal")]


def warm(d, kind):
    if kind in ("window", "dense", "causal"):
        make_window(d, 512, 128, kind)()
    elif kind.startswith("varlen"):
        varlen_backward_of([256, 128], d, kind.endswith("causal"))()
    else:
        mode, _, causal = kind.partition("-")
        backward_of(1, 256, d, causal=bool(causal), softcap=30.0 if mode == "softcap" else 0.0,
                    alibi=mode == "alibi")()


if len(sys.argv) == 3 and sys.argv[1] == "--warm":
    warm(*WARM[int(sys.argv[2])])
    torch.cuda.synchronize()
    sys.exit(0)

print(f"H={H} {dt}, {torch.cuda.get_device_name()}, torch {torch.__version__}")
print()
print("| D | S | window | pairs | window ms | dense S_d | dense ms | causal S_c | causal ms | window / dense per pair | window / causal per pair | kernels |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for d, s, w in WINDOWS:
    pairs = window_pairs(s, w)
    sd, sc = round(math.sqrt(pairs)), round(math.sqrt(2 * pairs))
    t, ran = {}, {}
    for kind in ("window", "dense", "causal"):
        t[kind] = median_ms(make_window(d, s, w, kind))
        ran[kind] = RAN[-1]
    dense_pairs, causal_pairs = sd * sd, sc * (sc + 1) // 2
    r_dense = (t["window"] / pairs) / (t["dense"] / dense_pairs)
    r_causal = (t["window"] / pairs) / (t["causal"] / causal_pairs)
    print(f"| {d} | {s} | {w} | {pairs} | {t['window']:.3f} | {sd} | {t['dense']:.3f} | {sc} | {t['causal']:.3f} | "
          f"{r_dense:.3f} | {r_causal:.3f} | {ran['window']}, {ran['dense']}, {ran['causal']} |")
    sys.stdout.flush()
print()
print("| D | B,S | causal | mode | with mode ms | without ms | ratio | kernels |")
print("|---:|---|---:|---|---:|---:|---:|---|")
for d, b, s, causal, mode in MODE_ROWS:
    with_mode = median_ms(backward_of(b, s, d, causal=causal, softcap=30.0 if mode == "softcap" else 0.0,
                                      alibi=mode == "alibi"))
    k_mode = RAN[-1]
    plain = median_ms(backward_of(b, s, d, causal=causal))
    k_plain = RAN[-1]
    print(f"| {d} | {b},{s} | {int(causal)} | {mode} | {with_mode:.3f} | {plain:.3f} | {with_mode / plain:.3f} | "
          f"{k_mode}, {k_plain} |")
    sys.stdout.flush()
print()
print("| D | row | causal | dense twin | varlen ms | dense ms | varlen / dense per FLOP | kernels |")
print("|---:|---|---:|---|---:|---:|---:|---|")
for d in (64, 128):
    for name, lens in VARLEN_ROWS:
        for causal in (False, True):
            b, s = dense_twin(lens)
            t_var = median_ms(varlen_backward_of(lens, d, causal))
            k_var = RAN[-1]
            t_dense = median_ms(backward_of(b, s, d, causal=causal))
            k_dense = RAN[-1]
            flops_var, flops_dense = sum(L * L for L in lens), b * s * s
            ratio = (t_var / flops_var) / (t_dense / flops_dense)
            print(f"| {d} | {name} | {int(causal)} | {b}x{s} | {t_var:.3f} | {t_dense:.3f} | {ratio:.3f} | {k_var}, {k_dense} |")
            sys.stdout.flush()
