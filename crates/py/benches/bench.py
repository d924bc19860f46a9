"""flashcore from Python against SDPA (cuDNN and flash backends) from the same Python, as a
PyTorch user measures it: CUDA events around back-to-back calls (eager), and the same calls
captured in one CUDA graph and replayed. Inputs are rotated through enough sets to exceed twice
the L2 cache, as `cargo xtask bench-all` does, so the large shapes compare with its rows.

    python bench.py [--out DIR] [--shapes B,H,S,D ...] [--dtype f16|bf16]

Writes bench-python.json and bench-python.md to --out (default .).
"""

import argparse
import contextlib
import json
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashcore
from flashcore import flash_attn_func

DEFAULT_SHAPES = ["1,8,512,64", "4,16,2048,128", "1,16,16384,128", "8,32,4096,128"]
L2_BYTES = 60 << 20


def input_sets(b, h, s, d, dtype, layout, dv=None):
    """Enough (q, k, v) sets to exceed twice the L2: `bshd` for flashcore, `bhsd` for SDPA; v
    with head dim `dv` (default d)."""
    dv = dv or d
    per_set = b * h * s * (2 * d + dv) * torch.finfo(dtype).bits // 8
    n = max(2, math.ceil(2 * L2_BYTES / per_set))

    def shape(dim):
        return (b, s, h, dim) if layout == "bshd" else (b, h, s, dim)

    g = torch.Generator(device="cuda").manual_seed(0)
    return [
        tuple(torch.randn(shape(dim), dtype=dtype, device="cuda", generator=g)
              for dim in (d, d, dv))
        for _ in range(n)
    ]


def eager_us(call, sets, min_ms=20.0, repeats=15):
    """Median over `repeats` samples of back-to-back calls (each sample at least `min_ms`)."""
    for i in range(3):
        call(*sets[i % len(sets)])
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n = len(sets)
    start.record()
    for i in range(n):
        call(*sets[i])
    end.record()
    end.synchronize()
    per = max(start.elapsed_time(end) / n, 1e-3)
    calls = max(n, int(min_ms / per))
    samples = []
    for _ in range(repeats):
        start.record()
        for i in range(calls):
            call(*sets[i % n])
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(samples)


def graph_us(call, sets, calls_per_graph=50, repeats=15):
    """Median per-call time of a CUDA graph of `calls_per_graph` calls over the input sets."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            call(*sets[i % len(sets)])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls_per_graph):
            call(*sets[i % len(sets)])
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(repeats):
        start.record()
        for _ in range(4):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / (4 * calls_per_graph))
    return statistics.median(samples)


def prepared_direct(sets, causal):
    """The prepared forward's launch alone (PyO3 and the Rust launch of a prepared plan):
    pointers, outputs and workspace taken once, outside the timed loop. Against the flashcore
    row, what the Python fast path adds (key, allocation, scratch) is the rest."""
    from flashcore import _flashcore, _ops

    q, k, v = sets[0]
    b, s, h, d = q.shape
    out = torch.empty_like(q)
    lse = torch.empty((b, h, s), dtype=torch.float32, device=q.device)
    ws = torch.zeros(1 << 20, dtype=torch.float32, device=q.device)
    index = q.device.index
    prep = _flashcore.prepare_forward(
        _ops._shape_arg(q), _ops._shape_arg(k), _ops._shape_arg(v),
        (1.0 / math.sqrt(d), causal, (-1, -1), 0.0), index)
    ptrs = [(qq.data_ptr(), kk.data_ptr(), vv.data_ptr()) for (qq, kk, vv) in sets]
    i = [0]

    def call(qq, kk, vv):
        p = ptrs[i[0] % len(ptrs)]
        i[0] += 1
        prep.launch(*p, out.data_ptr(), lse.data_ptr(), (ws.data_ptr(), ws.numel()),
                    _ops._stream(index))
        return out

    return call


def rust_direct(sets, causal):
    """The extension's forward alone (PyO3 and the Rust launch path): arguments, outputs and
    workspace built once, outside the timed loop. What the Python layer adds is the rest."""
    from flashcore import _flashcore, _ops

    q = sets[0][0]
    b, s, h, d = q.shape
    out = torch.empty_like(q)
    lse = torch.empty((b, h, s), dtype=torch.float32, device=q.device)
    ws = torch.zeros(1 << 20, dtype=torch.float32, device=q.device)
    index = q.device.index
    prebuilt = [
        tuple(_ops._arg(t) for t in (qq, kk, vv, out, lse)) for (qq, kk, vv) in sets
    ]
    i = [0]

    def call(qq, kk, vv):
        a = prebuilt[i[0] % len(prebuilt)]
        i[0] += 1
        # alibi_slopes, k_descale, v_descale, q_descale: none; check_tables: off.
        _flashcore.forward(*a, (1.0 / math.sqrt(d), causal, (-1, -1), 0.0), None, None, None,
                           None, False, (ws.data_ptr(), ws.numel()), index, _ops._stream(index))
        return out

    return call


def flops(b, h, s, d, causal, dv=None):
    f = 2.0 * b * h * s * s * (d + (dv or d))
    return f / 2 if causal else f


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", nargs="*", default=DEFAULT_SHAPES,
                    help="B,H,S,D or B,H,S,D,DV (V's own head dim)")
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    ap.add_argument("--repeats", type=int, default=15, help="samples per measurement (median)")
    ap.add_argument("--breakdown", action="store_true",
                    help="at the first shape, also time the extension's forward called directly")
    ap.add_argument("--impls", nargs="*", default=None,
                    help="time only these (flashcore, sdpa-cudnn, sdpa-flash, ...)")
    ap.add_argument("--graph-max-us", type=float, default=200.0,
                    help="shapes whose eager call is faster than this are also timed as graphs")
    args = ap.parse_args()
    dtype = torch.float16 if args.dtype == "f16" else torch.bfloat16
    rows = []
    for shape in args.shapes:
        b, h, s, d, *rest = (int(x) for x in shape.split(","))
        dv = rest[0] if rest else None
        fc_sets = input_sets(b, h, s, d, dtype, "bshd", dv)
        pt_sets = input_sets(b, h, s, d, dtype, "bhsd", dv)
        for causal in (False, True):
            impls = {
                "flashcore": (lambda q, k, v: flash_attn_func(q, k, v, causal=causal), fc_sets),
            }
            backends = {"sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
                        "sdpa-flash": SDPBackend.FLASH_ATTENTION}
            if dv:  # SDPA's flash backend takes one head dim; its efficient one takes two
                backends["sdpa-efficient"] = SDPBackend.EFFICIENT_ATTENTION
            for name in backends:
                def sdpa(q, k, v):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                impls[name] = (sdpa, pt_sets)
            if shape == args.shapes[0] and args.breakdown:
                impls["flashcore-rust-direct"] = (rust_direct(fc_sets, causal), fc_sets)
                impls["flashcore-prepared-direct"] = (prepared_direct(fc_sets, causal), fc_sets)
            for name, (call, sets) in impls.items():
                if args.impls is not None and name not in args.impls:
                    continue
                row = dict(shape=shape, causal=causal, dtype=args.dtype, impl=name)
                # SDPA's backend is chosen once, outside the timed loop (as a model would).
                backend = sdpa_kernel(backends[name]) if name in backends else contextlib.nullcontext()
                try:
                    with backend:
                        row["eager_us"] = eager_us(call, sets, repeats=args.repeats)
                        if row["eager_us"] < args.graph_max_us:
                            row["graph_us"] = graph_us(call, sets)
                    row["tflops"] = flops(b, h, s, d, causal, dv) / row["eager_us"] / 1e6
                except Exception as e:  # a peer that refuses a shape is a row, not a crash
                    row["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
                rows.append(row)
                print(json.dumps(row), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench-python.json"), "w") as f:
        json.dump(dict(torch=torch.__version__, flashcore=flashcore.__version__,
                       device=torch.cuda.get_device_name(), rows=rows), f, indent=1)
    lines = [
        f"flashcore {flashcore.__version__} from Python, torch {torch.__version__}, "
        f"{torch.cuda.get_device_name()}, {args.dtype}; CUDA events around back-to-back calls "
        "(median of 15 samples of >= 20 ms), graphs of 50 calls",
        "",
        "| B,H,S,D | causal | impl | eager us | graph us | TFLOP/s (eager) |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['shape']} | {r['causal']} | {r['impl']} | {r['error']} | | |")
            continue
        g = f"{r['graph_us']:.2f}" if "graph_us" in r else "-"
        lines.append(f"| {r['shape']} | {'yes' if r['causal'] else 'no'} | {r['impl']} | "
                     f"{r['eager_us']:.2f} | {g} | {r['tflops']:.1f} |")
    with open(os.path.join(args.out, "bench-python.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
