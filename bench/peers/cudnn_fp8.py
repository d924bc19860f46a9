#!/usr/bin/env python3
"""Times cuDNN's fp8 (e4m3) attention forward, and the e4m3 and bf16 GEMM rates as the compute
reference, for `cargo xtask bench-all --suite fp8`.

    python3 bench/peers/cudnn_fp8.py --shapes shapes.json --out peers-fp8.json [--quick]
        [--gemm-n 8192 | --no-gemm]

cuDNN is reached through the nvidia-cudnn-frontend wheel (`import cudnn`: its `pygraph` and the
`sdpa_fp8` node), installed apart from the system's packages with
`pip install --no-deps --target DIR nvidia_cudnn_frontend-*.whl` and put first on PYTHONPATH by
the bench (`--cudnn-fe-path DIR` or $FLASHCORE_CUDNN_FE_PATH). The cuDNN library it drives is the
one torch ships (nvidia/cudnn/lib, found through torch's `nvidia.cudnn` package), so the peer runs
on the same cuDNN as torch's own SDPA.

Input: the shapes file of torch_sdpa.py (peer_shapes.py); "dtype" is O's (bf16 or f16): Q, K and
V are e4m3. Inputs are random normal values cast to float8_e4m3fn (round to nearest; |x| < 448
here), layout B,H,S,D contiguous, every descale (Q, K, V, S) and scale (S, O) 1, scale
1/sqrt(head_dim); no LSE (inference). O is asked for in "dtype"; where cuDNN refuses that, O in
e4m3 is tried and the row's "note" says so. Causal is top-left aligned, which is flashcore's
bottom-right on these square shapes (other causal shapes get an error row).

Output: torch_sdpa.py's schema, backend "cudnn_fp8" (one "eager" row per shape, or an "error"
row with cuDNN's reason), plus "cudnn_frontend" and "cudnn_backend" versions and
    "gemm": [{"name": "scaled_mm_e4m3" | "matmul_bf16", "n", "us", "tflops", "calls", "repeats"}
             | {"name", "n", "error"}]
(n^3 GEMMs at 2 n^3 FLOPs: torch._scaled_mm on e4m3 A and B with bf16 out, and torch.matmul on
bf16). "rel" is ||out - ref|| / ||ref|| on head (0, 0) against float64 math on the e4m3 inputs.

Method: torch_sdpa.py's, through its Bench: CUDA events around back-to-back calls, a sample
>= 20 ms, the median of 15 samples, input sets rotated so that one pass exceeds twice the L2.

Exit status: 0 on success (even if some rows are errors, or cudnn does not import: then every
row says why), 2 for bad arguments or a malformed shapes file, 3 when torch or CUDA is missing.
"""

import argparse
import glob
import json
import math
import os
import sys
import warnings

from peer_shapes import flops, import_cuda_torch, load_shapes
from torch_sdpa import Bench, calls_for, finite_or_null, reference_head, rel_error, short_error

BACKEND = "cudnn_fp8"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", required=True, help="JSON list of shapes (dtype: O's)")
    ap.add_argument("--out", required=True, help="where to write the results JSON")
    ap.add_argument("--quick", action="store_true", help="smoke mode: few, short samples")
    ap.add_argument("--gemm-n", type=int, default=8192, help="M = N = K of the GEMM lines")
    ap.add_argument("--no-gemm", action="store_true", help="no GEMM lines")
    args = ap.parse_args()
    shapes = load_shapes(args.shapes)

    torch = import_cuda_torch()
    warnings.filterwarnings("ignore", category=UserWarning)
    # No SDPA backends: only its timing loop and input-set rule are used.
    bench = Bench(torch, quick=args.quick, wanted=[])

    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None,
        "cuda": torch.version.cuda,
        "l2_bytes": bench.l2_bytes,
        "quick": args.quick,
        "skipped": [],
        "rows": [],
        "gemm": [],
    }
    cudnn, why = import_cudnn(torch)
    if cudnn is None:
        result["skipped"].append({"backend": BACKEND, "reason": why})
        print(f"[fp8 peers] cuDNN fp8 not timed: {why}", file=sys.stderr)
    else:
        result["cudnn_frontend"] = getattr(cudnn, "__version__", "?")
        try:
            result["cudnn_backend"] = str(cudnn.backend_version())
        except Exception as e:
            result["cudnn_backend"] = f"? ({short_error(e)})"
        print(f"[fp8 peers] cudnn frontend {result['cudnn_frontend']}, "
              f"backend {result['cudnn_backend']}", file=sys.stderr)

    if not args.no_gemm:
        for line in gemm_lines(torch, bench, args.gemm_n):
            result["gemm"].append(line)
            what = line.get("error") or f"{line['us']:.1f} us {line['tflops']:.1f} TFLOP/s"
            print(f"[fp8 peers] {line['name']} {args.gemm_n}^3: {what}", file=sys.stderr)
            write_json(args.out, result)

    handle = None
    if cudnn is not None:
        try:
            handle = cudnn.create_handle()
        except Exception as e:  # e.g. no libcudnn found for the frontend
            why = f"cudnn.create_handle() failed: {short_error(e)}"
            cudnn = None
            result["skipped"].append({"backend": BACKEND, "reason": why})
            print(f"[fp8 peers] cuDNN fp8 not timed: {why}", file=sys.stderr)
    for shape in shapes:
        if cudnn is None:
            row = dict(shape, backend=BACKEND, error=f"not timed: {why}")
        else:
            row = time_shape(torch, cudnn, handle, bench, shape)
        result["rows"].append(row)
        what = row.get("error") or f"{row['us']:.1f} us {row['tflops']:.1f} TFLOP/s rel {row['rel']}"
        if row.get("note"):
            what += f" ({row['note']})"
        print(f"[fp8 peers] {shape} {BACKEND}: {what}", file=sys.stderr)
        # Written after every shape: a run that dies part way keeps its rows.
        write_json(args.out, result)
    write_json(args.out, result)


def write_json(path, result):
    with open(path, "w") as f:
        # Strict JSON (the reader is serde_json): a NaN time becomes null.
        json.dump(finite_or_null(result), f, indent=1, allow_nan=False)
        f.write("\n")


def import_cudnn(torch):
    """(the cudnn module, None), or (None, why not). The frontend looks for libcudnn on
    LD_LIBRARY_PATH first: torch's copy is put there, so both run the same cuDNN."""
    try:
        import nvidia.cudnn

        for d in list(getattr(nvidia.cudnn, "__path__", [])):
            lib = os.path.join(d, "lib")
            if glob.glob(os.path.join(lib, "libcudnn.so*")):
                old = os.environ.get("LD_LIBRARY_PATH", "")
                os.environ["LD_LIBRARY_PATH"] = lib + (os.pathsep + old if old else "")
                break
    except Exception:
        pass  # no pip cuDNN beside torch: the frontend's own search (libcudnn.so.9) applies
    try:
        import cudnn
    except Exception as e:
        where = os.environ.get("PYTHONPATH", "")
        return None, (f"import cudnn failed: {short_error(e)} (PYTHONPATH={where!r}; install "
                      f"nvidia-cudnn-frontend with pip install --no-deps --target DIR and pass "
                      f"--cudnn-fe-path DIR)")
    if not hasattr(cudnn, "pygraph"):
        return None, f"cudnn {getattr(cudnn, '__version__', '?')} has no pygraph"
    return cudnn, None


def gemm_lines(torch, bench, n):
    """torch._scaled_mm on e4m3 (bf16 out) and torch.matmul on bf16, n x n x n each, timed as
    the attention calls are (one input set: at 2 n^3 FLOPs a call is compute-bound)."""
    out = []
    f = 2.0 * n ** 3
    one = torch.ones((), device="cuda", dtype=torch.float32)

    def rate(name, fn, a, b):
        try:
            fn(a, b, False)
            torch.cuda.synchronize()
            per_call = bench._time_eager(fn, [(a, b)], False, calls=3, repeats=1)
            calls = calls_for(per_call, bench.target_ms)
            us = bench._time_eager(fn, [(a, b)], False, calls, bench.repeats)
            return dict(name=name, n=n, us=us, tflops=f / us / 1e6, calls=calls,
                        repeats=bench.repeats)
        except Exception as e:
            return dict(name=name, n=n, error=short_error(e))

    try:
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        # _scaled_mm wants B column-major: the transpose of a row-major matrix is.
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        out.append(rate("scaled_mm_e4m3",
                        lambda a, b, _c: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                                          out_dtype=torch.bfloat16), a, b))
        del a, b
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        out.append(rate("matmul_bf16", lambda a, b, _c: torch.matmul(a, b), a, b))
        del a, b
    except Exception as e:  # out of memory allocating the operands
        out.append(dict(name="gemm", n=n, error=short_error(e)))
    torch.cuda.empty_cache()
    return out


def time_shape(torch, cudnn, handle, bench, shape):
    b, h, s, d = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"]
    hkv, sk, causal = shape["heads_kv"], shape["seq_k"], shape["causal"]
    if causal and sk != s:
        return dict(shape, backend=BACKEND,
                    error="causal with seq_k != seq: cuDNN's mask here is top-left aligned, "
                          "flashcore's bottom-right, so this would be another problem")
    o_dtype = torch.float16 if shape["dtype"] == "f16" else torch.bfloat16
    q_elems, kv_elems = b * h * s * d, b * hkv * sk * d
    # A call reads Q, K, V (a byte an element) and writes O.
    set_bytes = q_elems + 2 * kv_elems + q_elems * o_dtype.itemsize
    try:
        n_sets = bench.sets_needed(set_bytes, set_bytes)
        gen = torch.Generator(device="cuda").manual_seed(0)

        def e4m3(*dims):
            return torch.randn(*dims, device="cuda", generator=gen).to(torch.float8_e4m3fn)
        sets = [(e4m3(b, h, s, d), e4m3(b, hkv, sk, d), e4m3(b, hkv, sk, d))
                for _ in range(n_sets)]
    except torch.cuda.OutOfMemoryError as e:
        torch.cuda.empty_cache()
        return dict(shape, backend=BACKEND, error=f"out of memory allocating inputs: {e}")
    try:
        cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
        built, o_note = build_graph(torch, cudnn, handle, shape, o_dtype)
        if built is None:
            return dict(shape, backend=BACKEND, error=f"cuDNN refused it: {o_note}")
        graph, t, o_dt = built
        ws = torch.empty(max(1, graph.get_workspace_size()), device="cuda", dtype=torch.uint8)
        one = torch.ones(1, 1, 1, 1, device="cuda", dtype=torch.float32)
        packs = []
        for q, k, v in sets:
            o = torch.empty(b, h, s, d, device="cuda", dtype=o_dt)
            pack = {t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: o,
                    t["amax_s"]: torch.zeros(1, 1, 1, 1, device="cuda"),
                    t["amax_o"]: torch.zeros(1, 1, 1, 1, device="cuda")}
            for name in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s",
                         "scale_o"):
                pack[t[name]] = one
            packs.append((pack, o))

        def call(pack, _o, _causal):
            graph.execute(pack, ws, handle=handle)

        call(*packs[0], causal)
        torch.cuda.synchronize()
        # Head (0, 0) widened to f32 first (the reference reads only it).
        ref = reference_head(torch, [t[:1, :1].float() for t in sets[0]], causal)
        rel = rel_error(torch, packs[0][1][0, 0].float(), ref)
        del ref
        per_call = bench._time_eager(call, packs, causal, calls=3, repeats=1)
        calls = calls_for(per_call, bench.target_ms)
        us = bench._time_eager(call, packs, causal, calls, bench.repeats)
        row = dict(shape, backend=BACKEND, method="eager", us=us, tflops=flops(shape) / us / 1e6,
                   rel=rel, calls=calls, repeats=bench.repeats, sets=len(packs))
        if o_note:
            row["note"] = o_note
        return row
    except Exception as e:  # out of memory, a failed plan, ...
        return dict(shape, backend=BACKEND, error=short_error(e))
    finally:
        del sets
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def build_graph(torch, cudnn, handle, shape, o_dtype):
    """((graph, its tensors by name, O's torch dtype), note) for the first form cuDNN takes: O in
    the shape's dtype, else O in e4m3 (the note says why); the mask through the diagonal band
    (frontend 1.x), else the older use_causal_mask / is_inference arguments. (None, every
    reason) when it takes none."""
    dt = cudnn.data_type
    o_types = [(o_dtype, dt.HALF if o_dtype == torch.float16 else dt.BFLOAT16)]
    o_types.append((torch.float8_e4m3fn, dt.FP8_E4M3))
    causal = shape["causal"]
    modern = dict(generate_stats=False)
    if causal:
        modern.update(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                      diagonal_band_right_bound=0)
    classic = dict(is_inference=True, use_causal_mask=causal)
    reasons = []
    for o_torch, o_cudnn in o_types:
        for mask_args in (modern, classic):
            try:
                built = build_one(cudnn, handle, shape, o_cudnn, mask_args)
                note = None
                if o_torch != o_dtype:
                    note = (f"O in e4m3 (cuDNN refused O in {shape['dtype']}: "
                            f"{'; '.join(reasons)[:300]})")
                return (built[0], built[1], o_torch), note
            except Exception as e:
                r = short_error(e)
                if r not in reasons:
                    reasons.append(r)
    return None, "; ".join(reasons)


def build_one(cudnn, handle, shape, o_type, mask_args):
    b, h, s, d = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"]
    hkv, sk = shape["heads_kv"], shape["seq_k"]
    dt = cudnn.data_type
    g = cudnn.pygraph(io_data_type=o_type, intermediate_data_type=dt.FLOAT,
                      compute_data_type=dt.FLOAT, handle=handle)

    def bhsd(name, heads, seq):
        return g.tensor(name=name, dim=[b, heads, seq, d],
                        stride=[heads * seq * d, seq * d, d, 1], data_type=dt.FP8_E4M3)

    def scalar(name):
        return g.tensor(name=name, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=dt.FLOAT)

    t = {"q": bhsd("q", h, s), "k": bhsd("k", hkv, sk), "v": bhsd("v", hkv, sk)}
    for name in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"):
        t[name] = scalar(name)
    o, _stats, amax_s, amax_o = g.sdpa_fp8(
        q=t["q"], k=t["k"], v=t["v"], descale_q=t["descale_q"], descale_k=t["descale_k"],
        descale_v=t["descale_v"], descale_s=t["descale_s"], scale_s=t["scale_s"],
        scale_o=t["scale_o"], attn_scale=1.0 / math.sqrt(d), name="sdpa_fp8", **mask_args)
    o.set_output(True).set_dim([b, h, s, d]).set_stride([h * s * d, s * d, d, 1]) \
        .set_data_type(o_type)
    for a in (amax_s, amax_o):
        a.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(dt.FLOAT)
    t.update(o=o, amax_s=amax_s, amax_o=amax_o)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g, t


if __name__ == "__main__":
    main()
