#!/usr/bin/env python3
"""Times the peer attention kernels that flashcore is compared with, for `cargo xtask bench-all`.

    python3 bench/peers/torch_sdpa.py --shapes shapes.json --out peers.json [--quick]
        [--decode | --backward] [--backends sdpa_flash,sdpa_cudnn,...]

Peers: PyTorch SDPA forced onto one backend at a time (FlashAttention-2, cuDNN, memory-efficient)
and, when `flash_attn_interface` (FlashAttention-3, Hopper) or `flash_attn3_jax` imports, FA3.
A peer that is not installed is listed under "skipped" with the reason; a peer that fails on a
shape gets a row with "error" instead of a time.

Input: a JSON list of {"batch", "heads", "seq", "head_dim", "causal", "dtype": "f16"|"bf16"}
(a {"shapes": [...]} object is accepted too), each optionally with "heads_kv" (GQA: K/V heads,
dividing "heads"; default "heads") and "seq_k" (keys per sequence; default "seq"). Inputs are
random normal, layout B,H,S,D contiguous, default scale 1/sqrt(head_dim). Causal needs
seq_k = seq: SDPA's is_causal is top-left aligned, flashcore's bottom-right, and they agree only
on square problems (other causal shapes get an error row). GQA: SDPA is called with
enable_gqa=True; a backend that refuses it is timed on K/V repeated to "heads" heads
(repeat_interleave, done once outside the timed calls: what a user of that backend does), and
its rows say so in "note".

Output:
    {"device": str, "torch": str, "cudnn": str|null, "cuda": str|null, "l2_bytes": int,
     "quick": bool, "skipped": [{"backend", "reason"}],
     "rows": [{"batch", "heads", "seq", "head_dim", "causal", "dtype", "backend",
               "method": "eager"|"graph", "us", "tflops", "rel", "calls", "repeats", "sets"}
              | {<shape fields>, "backend", "error": str}]}
(shape fields always include "heads_kv" and "seq_k"; rows may carry a "note").
"us" is the median time of one call in microseconds, "tflops" uses 4*B*H*S*S_k*D (halved when
causal), "rel" is ||out - ref|| / ||ref|| on head (0, 0) against float64 math.
Backends: "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "fa3".

Method (the same as flashcore's own benchmarks, so the numbers compare):
  - CUDA events around `calls` back-to-back calls, `calls` chosen so one sample lasts >= 20 ms;
    the median of >= 15 samples.
  - Several input sets rotated call to call, so that the bytes touched exceed 2x the L2 cache
    and no call finds its inputs left in L2 by the previous one.
  - Shapes whose single call is under ~50 us are launch-bound in eager mode, so they are also
    timed as CUDA-graph replays of 50 captured calls: both rows are reported. "Under 50 us" is
    judged on the graph time (eager times include the host's per-call overhead).

--decode (`cargo xtask bench-all --suite decode`): the method of the decode anchor file
(shared/anchors/h100-decode-peers.txt), for memory-bound shapes whose every set is already larger
than the L2: at least 3 input sets rotated (more if 2x L2 needs them), 30 calls captured in one
CUDA graph, the graph replayed 11 times with each replay timed by events, the median per call
reported as a "graph" row (no eager row). Rows also carry "gbps": K and V bytes read
(2*B*H_kv*S_k*D*2) / time.

--backward (`cargo xtask bench-all --pass bwd | fwdbwd`): the method of the backward anchor file
(shared/anchors/h100-backward-peers.txt) with this script's sampling. Q, K, V require grad and each
input set has its own random dO. Per backend, samples of `fwd` (the forward alone, autograd on)
and of `fwd + torch.autograd.grad(out, (q, k, v), dO)` alternate, each sample CUDA events around
back-to-back calls lasting >= 20 ms, sets rotated as above; "fwd_us" and "fwdbwd_us" are the
medians and "bwd_us" = fwdbwd_us - fwd_us. One "eager" row per backend with those three times,
"tflops" on 2.5x the forward FLOPs (bwd), "fwdbwd_tflops" on 3.5x, "rel" of the output and
"grad_rel" {"dq", "dk", "dv"} of head (0, 0) against float64 gradients of sum(O * dO) (null
under GQA), "calls" (fwd + grad calls per sample) and "calls_fwd". No graph rows.

--backends NAME,...: time only these peers (others are not looked for, nor listed as skipped).

Exit status: 0 on success (even if some rows are errors), 2 for bad arguments or a malformed
shapes file, 3 when torch or CUDA is missing (one line on stderr says which).
"""

import argparse
import contextlib
import json
import math
import statistics
import sys
import warnings

from peer_shapes import fail, flops, import_cuda_torch, kv_bytes, load_shapes  # shared with fa3_jax.py

GRAPH_THRESHOLD_US = 50.0  # a call shorter than this also gets a "graph" row
# Eager timings include the host's per-call overhead (tens of us for SDPA), so a kernel under
# 50 us can look slower than that eagerly: any shape whose eager call is under this bound is
# timed as graph replays, and the graph row is kept when the graph says the call is short.
GRAPH_PROBE_US = 250.0
GRAPH_CALLS = 50  # calls captured in one graph
# --decode: the decode anchor file's method.
DECODE_SETS = 3
DECODE_GRAPH_CALLS = 30
DECODE_REPLAYS = 11
BACKENDS = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "fa3")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", required=True, help="JSON list of shapes")
    ap.add_argument("--out", required=True, help="where to write the results JSON")
    ap.add_argument("--quick", action="store_true", help="smoke mode: few, short samples")
    ap.add_argument("--decode", action="store_true",
                    help=f"graph replays only: >= {DECODE_SETS} sets, {DECODE_GRAPH_CALLS} calls "
                         f"captured, {DECODE_REPLAYS} replays, median per call")
    ap.add_argument("--backward", action="store_true",
                    help="time fwd and fwd + autograd.grad; bwd = the difference")
    ap.add_argument("--backends", default=None,
                    help=f"comma-separated peers to time (of {', '.join(BACKENDS)}; default all)")
    args = ap.parse_args()
    backends = None
    if args.backends is not None:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
        unknown = [b for b in backends if b not in BACKENDS]
        if unknown:
            fail(2, f"--backends: unknown {', '.join(unknown)} (known: {', '.join(BACKENDS)})")
    if args.decode and args.backward:
        fail(2, "--decode and --backward do not go together")
    shapes = load_shapes(args.shapes)

    torch = import_cuda_torch()

    # Expected refusals are reported in the rows (see _time_backend), not as warnings.
    warnings.filterwarnings("ignore", category=UserWarning)
    bench = Bench(torch, quick=args.quick, decode=args.decode, wanted=backends,
                  backward=args.backward)
    rows = []
    for shape in shapes:
        shape_rows = bench.run_shape(shape)
        rows.extend(shape_rows)
        # Progress on stderr: stdout stays clean for a caller that might parse it.
        for r in shape_rows:
            if "error" in r:
                what = r["error"]
            elif args.backward:
                what = (f"fwd {r['fwd_us']:.1f} us, fwd+grad {r['fwdbwd_us']:.1f} us, "
                        f"bwd {r['bwd_us']:.1f} us rel {r['rel']} grad_rel {r['grad_rel']}")
            else:
                what = f"{r['us']:.1f} us {r['tflops']:.1f} TFLOPS rel {r['rel']}"
            if "gbps" in r:
                what += f" {r['gbps']:.0f} GB/s"
            print(f"[peers] {shape} {r['backend']}/{r.get('method', '-')}: {what}", file=sys.stderr)

    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None,
        "cuda": torch.version.cuda,
        "l2_bytes": bench.l2_bytes,
        "quick": args.quick,
        "decode": args.decode,
        "backward": args.backward,
        "skipped": bench.skipped,
        "rows": rows,
    }
    with open(args.out, "w") as f:
        # Strict JSON (the reader is serde_json): a NaN error or time becomes null.
        json.dump(finite_or_null(result), f, indent=1, allow_nan=False)
        f.write("\n")


def finite_or_null(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite_or_null(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite_or_null(v) for v in x]
    return x


class Bench:
    def __init__(self, torch, quick, decode=False, wanted=None, backward=False):
        self.torch = torch
        self.quick = quick
        self.decode = decode
        self.backward = backward
        self.wanted = wanted  # None: every backend
        # Sample length and count: the project's method, or a fast smoke version of it.
        self.target_ms = 2.0 if quick else 20.0
        self.repeats = 5 if quick else 15
        props = torch.cuda.get_device_properties(0)
        # L2_cache_size appeared in torch 2.1-ish; H100's 50 MB is the safe assumption before.
        self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 50 * 1024 * 1024)
        self.free_bytes = torch.cuda.mem_get_info()[0]
        self.skipped = []
        self.backends = self._find_backends()

    # ---- which peers exist -----------------------------------------------------------------

    def _find_backends(self):
        """(name, context, fn) per peer: fn(q, k, v, causal) returns the output as B,H,S,D and
        runs inside `with context():` (which selects the SDPA backend)."""
        torch = self.torch
        backends = []
        wanted = (lambda name: self.wanted is None or name in self.wanted)
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError as e:
            reason = f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel ({e})"
            for name in ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient"):
                if wanted(name):
                    self.skipped.append({"backend": name, "reason": reason})
            SDPBackend = None
        if SDPBackend is not None:
            sdpa = torch.nn.functional.scaled_dot_product_attention
            for name, attr in (("sdpa_flash", "FLASH_ATTENTION"),
                               ("sdpa_cudnn", "CUDNN_ATTENTION"),
                               ("sdpa_efficient", "EFFICIENT_ATTENTION")):
                if not wanted(name):
                    continue
                backend = getattr(SDPBackend, attr, None)
                if backend is None:
                    self.skipped.append({"backend": name,
                                         "reason": f"torch {torch.__version__} has no SDPBackend.{attr}"})
                    continue

                # sdpa_kernel allows only this backend: a shape it cannot run raises instead of
                # silently falling back to another one. It is entered once around all of a
                # backend's calls (warm-up, timing, graph capture), not per call, so eager times
                # carry SDPA's own dispatch cost and not the context manager's.
                def call(q, k, v, causal):
                    if k.shape[1] != q.shape[1]:
                        # GQA: only passed when needed, so older torch runs the MHA shapes.
                        return sdpa(q, k, v, is_causal=causal, enable_gqa=True)
                    return sdpa(q, k, v, is_causal=causal)
                backends.append((name, lambda _b=backend: sdpa_kernel(_b), call))

        fa3 = self._find_fa3() if wanted("fa3") else None
        if fa3 is not None:
            backends.append(("fa3", contextlib.nullcontext, fa3))
        return backends

    def _find_fa3(self):
        torch = self.torch
        reasons = []
        try:
            import flash_attn_interface  # FlashAttention-3 (hopper/ in Dao-AILab/flash-attention)

            def call(q, k, v, causal):
                # FA3 takes B,S,H,D; the transposes are views (no copy) of the B,H,S,D inputs,
                # and the output view transposes back. Older releases return (out, lse).
                out = flash_attn_interface.flash_attn_func(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
                if isinstance(out, tuple):
                    out = out[0]
                return out.transpose(1, 2)
            return call
        except Exception as e:
            reasons.append(f"flash_attn_interface: {type(e).__name__}: {e}")
        try:
            import flash_attn3_jax  # noqa: F401  (importable, but see below)
            # A JAX peer cannot be timed with torch's CUDA events or captured in a torch graph,
            # so it would not be measured the same way as everything else here: reported, not
            # timed.
            reasons.append("flash_attn3_jax imports, but a JAX kernel is not timed by this "
                           "torch-based script (different runtime: bench/peers/fa3_jax.py" +
                           (" --backward" if self.backward else "") +
                           " times it in its own process)")
        except Exception as e:
            reasons.append(f"flash_attn3_jax: {type(e).__name__}: {e}")
        self.skipped.append({"backend": "fa3", "reason": "; ".join(reasons)})
        return None

    # ---- one shape -------------------------------------------------------------------------

    def run_shape(self, shape):
        torch = self.torch
        rows = []
        dtype = torch.float16 if shape["dtype"] == "f16" else torch.bfloat16
        b, h, s, d = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"]
        hkv, sk = shape["heads_kv"], shape["seq_k"]
        if shape["causal"] and sk != s:
            why = ("causal with seq_k != seq: SDPA's is_causal is top-left aligned, flashcore's "
                   "bottom-right, so this would be another problem")
            return [dict(shape, backend=name, error=why) for name, _, _ in self.backends]
        try:
            sets = self._input_sets(b, h, hkv, s, sk, d, dtype)
        except torch.cuda.OutOfMemoryError as e:
            torch.cuda.empty_cache()
            return [dict(shape, backend=name, error=f"out of memory allocating inputs: {e}")
                    for name, _, _ in self.backends]
        try:
            if self.backward:
                # dK, dV of K/V head 0 sum over its query heads: head 0 alone is the whole
                # gradient only without GQA.
                ref = reference_head_grads(torch, sets[0], shape["causal"], hkv == h)
            else:
                ref = reference_head(torch, sets[0], shape["causal"])
        except Exception as e:  # e.g. out of memory on a very long sequence: time it anyway
            print(f"[peers] {shape}: no float64 reference ({short_error(e)}); rel = null",
                  file=sys.stderr)
            ref = None
            torch.cuda.empty_cache()
        time_one = self._time_backward if self.backward else self._time_backend
        for name, context, fn in self.backends:
            try:
                with context():
                    rows.extend(time_one(shape, name, fn, sets, ref))
            except Refused as e:
                if self.backward or hkv == h or not name.startswith("sdpa"):
                    rows.append(dict(shape, backend=name, error=short_error(e)))
                else:
                    rows.extend(self._time_repeated_kv(shape, name, context, fn, sets, ref, e))
            except Exception as e:  # an unsupported shape, OOM, ...
                rows.append(dict(shape, backend=name, error=short_error(e)))
            try:
                torch.cuda.synchronize()
            except Exception:
                pass  # a failed capture can leave an error behind; the next backend retries
        del sets
        torch.cuda.empty_cache()
        return rows

    def sets_needed(self, set_bytes, held_bytes, minimum=2):
        """How many input sets to rotate: enough that one pass over them (`set_bytes` each: what
        a call reads and writes) exceeds twice the L2, within a quarter of the free memory
        (`held_bytes` a set), at least `minimum`; 2 with --quick. (cudnn_fp8.py uses it too.)"""
        want = max(minimum, math.ceil(2 * self.l2_bytes / set_bytes) + 1)
        fit = max(1, int(0.25 * self.free_bytes) // held_bytes)
        return min(want, fit, 2 if self.quick else 1000)

    def _input_sets(self, b, h, hkv, s, sk, d, dtype):
        """Enough independent (q, k, v) sets that rotating through them touches more than twice
        the L2 (each call also writes an output of q's size), within a quarter of free memory.
        --backward: (q, k, v, dO) sets, q, k, v requiring grad; a call also reads O and dO and
        writes dQ, dK, dV."""
        torch = self.torch
        q_elems, kv_elems = b * h * s * d, b * hkv * sk * d
        if self.backward:
            set_bytes = (4 * q_elems + 4 * kv_elems) * 2
            held = (2 * q_elems + 2 * kv_elems) * 2
        else:
            set_bytes = (2 * q_elems + 2 * kv_elems) * 2  # q, k, v read + o written
            held = (q_elems + 2 * kv_elems) * 2
        n = self.sets_needed(set_bytes, held, DECODE_SETS if self.decode else 2)
        gen = torch.Generator(device="cuda").manual_seed(0)

        def one():
            q = torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=gen)
            k = torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype, generator=gen)
            v = torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype, generator=gen)
            if not self.backward:
                return (q, k, v)
            d_o = torch.randn(b, h, s, d, device="cuda", dtype=dtype, generator=gen)
            return (q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), d_o)
        return [one() for _ in range(n)]

    def _time_repeated_kv(self, shape, name, context, fn, sets, ref, refused):
        """A backend that refused enable_gqa, timed on K/V repeated to the query heads: the
        copies are made once, before timing, for the same sets (the repeated K/V only add bytes
        to the rotation), and the rows carry a note saying so."""
        torch = self.torch
        group = shape["heads"] // shape["heads_kv"]
        note = (f"GQA: K/V repeated to {shape['heads']} heads before timing "
                f"(enable_gqa refused: {short_error(refused)[:200]})")
        try:
            rep = [(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1))
                   for q, k, v in sets]
        except torch.cuda.OutOfMemoryError as e:
            torch.cuda.empty_cache()
            return [dict(shape, backend=name, error=f"{note}; out of memory: {e}")]
        try:
            with context():
                rows = self._time_backend(shape, name, fn, rep, ref)
            return [dict(r, note=note) for r in rows]
        except Exception as e:
            return [dict(shape, backend=name, error=f"{short_error(e)} ({note})")]
        finally:
            del rep
            torch.cuda.empty_cache()

    def _first_call(self, call):
        """call()'s result, synchronized; raises Refused if the backend refuses the shape. SDPA
        says why only through UserWarnings ("Flash attention requires ... head_dim <= 256"),
        and raises a bare "No available kernel": the warnings go into the error row instead of
        onto stderr."""
        torch = self.torch
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = call()
                torch.cuda.synchronize()
                return result
            except Exception as e:
                why = []
                for w in caught:
                    text = str(w.message).split(" (Triggered internally")[0].strip()
                    # Skip the filler ("... not used because:", "... runtime disabled" for the
                    # backends sdpa_kernel switched off on purpose).
                    if (text and text not in why and not text.endswith("because:")
                            and "runtime disabled" not in text):
                        why.append(text)
                raise Refused("; ".join([short_error(e)] + why)) from e

    def _time_backend(self, shape, name, fn, sets, ref):
        torch = self.torch
        causal = shape["causal"]
        out = self._first_call(lambda: fn(*sets[0], causal))
        rel = rel_error(torch, out[0, 0], ref)
        del out

        if self.decode:
            us_g, calls_g, replays = self._time_graph_fixed(fn, sets, causal)
            return [dict(shape, backend=name, rel=rel, repeats=replays, sets=len(sets),
                         method="graph", us=us_g, tflops=flops(shape) / us_g / 1e6,
                         gbps=kv_bytes(shape) / us_g / 1e3, calls=calls_g)]

        per_call_us = self._time_eager(fn, sets, causal, calls=3, repeats=1)
        calls = calls_for(per_call_us, self.target_ms)
        us = self._time_eager(fn, sets, causal, calls, self.repeats)
        base = dict(shape, backend=name, rel=rel, repeats=self.repeats, sets=len(sets))
        rows = [dict(base, method="eager", us=us, tflops=flops(shape) / us / 1e6, calls=calls)]

        if us < GRAPH_PROBE_US:
            # A capture failure must not lose the eager row already measured.
            try:
                us_g, calls_g = self._time_graph(fn, sets, causal)
                if min(us, us_g) < GRAPH_THRESHOLD_US:
                    rows.append(dict(base, method="graph", us=us_g,
                                     tflops=flops(shape) / us_g / 1e6, calls=calls_g))
            except Exception as e:
                rows.append(dict(shape, backend=name, method="graph", error=short_error(e)))
        return rows

    def _time_backward(self, shape, name, fn, sets, ref):
        """--backward: the first call checked (output and gradients against `ref`, gradients
        finite), then alternating samples of fwd and fwd + grad; one row."""
        torch = self.torch
        causal = shape["causal"]

        def fwd(q, k, v, d_o, causal):
            return fn(q, k, v, causal)

        def fwd_grad(q, k, v, d_o, causal):
            return torch.autograd.grad(fn(q, k, v, causal), (q, k, v), d_o)

        q, k, v, d_o = sets[0]
        out, grads = self._first_call(
            lambda: (lambda o: (o, torch.autograd.grad(o, (q, k, v), d_o)))(fn(q, k, v, causal)))
        ref_out, ref_grads = ref if ref is not None else (None, None)
        rel = rel_error(torch, out[0, 0].detach(), ref_out)
        grad_rel = None
        if ref_grads is not None:
            grad_rel = {n: rel_error(torch, g[0, 0], r)
                        for n, g, r in zip(("dq", "dk", "dv"), grads, ref_grads)}
        finite = all(bool(torch.isfinite(g).all()) for g in grads)
        del out, grads
        if not finite:
            return [dict(shape, backend=name, rel=rel, grad_rel=grad_rel,
                         error="non-finite gradients on the first call")]

        calls_f = calls_for(self._time_eager(fwd, sets, causal, calls=3, repeats=1),
                            self.target_ms)
        calls_fb = calls_for(self._time_eager(fwd_grad, sets, causal, calls=3, repeats=1),
                             self.target_ms)
        fwd_samples, fb_samples = [], []
        for _ in range(self.repeats):  # alternating: a drift of clocks hits both alike
            fwd_samples.append(self._time_eager(fwd, sets, causal, calls_f, 1))
            fb_samples.append(self._time_eager(fwd_grad, sets, causal, calls_fb, 1))
        fwd_us = statistics.median(fwd_samples)
        fb_us = statistics.median(fb_samples)
        bwd_us = fb_us - fwd_us
        f = flops(shape)
        return [dict(shape, backend=name, method="eager", fwd_us=fwd_us, fwdbwd_us=fb_us,
                     bwd_us=bwd_us,
                     tflops=2.5 * f / bwd_us / 1e6 if bwd_us > 0 else None,
                     fwdbwd_tflops=3.5 * f / fb_us / 1e6, rel=rel, grad_rel=grad_rel,
                     calls=calls_fb, calls_fwd=calls_f, repeats=self.repeats, sets=len(sets))]

    def _time_eager(self, fn, sets, causal, calls, repeats):
        """Median over `repeats` samples of (event time of `calls` back-to-back calls) / calls,
        in microseconds. The input set changes every call."""
        torch = self.torch
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        samples, i = [], 0
        for _ in range(repeats):
            start.record()
            for _ in range(calls):
                fn(*sets[i % len(sets)], causal)
                i += 1
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / calls)
        return statistics.median(samples)

    def _time_graph(self, fn, sets, causal):
        """Captures GRAPH_CALLS calls (or one per input set if there are more sets) in one CUDA
        graph and times replays the same way; returns (us per call, calls per sample)."""
        torch = self.torch
        n_calls = max(GRAPH_CALLS, len(sets))
        graph = self._capture(fn, sets, causal, n_calls)

        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        replays = calls_for(start.elapsed_time(end) * 1e3, self.target_ms)
        samples = []
        for _ in range(self.repeats):
            start.record()
            for _ in range(replays):
                graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / (replays * n_calls))
        del graph
        return statistics.median(samples), replays * n_calls

    def _capture(self, fn, sets, causal, n_calls):
        """A CUDA graph of n_calls calls, call i on set i % len(sets), warmed up (outside the
        capture, on a side stream) and replayed once."""
        torch = self.torch
        # Warm up on a side stream first: some backends (cuDNN) build plans on first use, which
        # must not happen inside the capture.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(3):
                fn(*sets[i % len(sets)], causal)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(n_calls):
                fn(*sets[i % len(sets)], causal)
        graph.replay()
        torch.cuda.synchronize()
        return graph

    def _time_graph_fixed(self, fn, sets, causal):
        """--decode: DECODE_GRAPH_CALLS calls in one graph, DECODE_REPLAYS replays each timed by
        events; returns (median us per call, calls per sample, samples)."""
        torch = self.torch
        n_calls = max(DECODE_GRAPH_CALLS, len(sets))
        replays = 3 if self.quick else DECODE_REPLAYS
        graph = self._capture(fn, sets, causal, n_calls)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        samples = []
        for _ in range(replays):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / n_calls)
        del graph
        return statistics.median(samples), n_calls, replays


class Refused(Exception):
    """A backend declined a shape; the message is already the full reason."""


def short_error(e):
    if isinstance(e, Refused):
        return str(e)[:1000]
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:1000]


def calls_for(us_per_call, target_ms):
    """How many back-to-back calls make one sample last at least target_ms."""
    return max(1, min(100_000, math.ceil(target_ms * 1e3 / max(us_per_call, 1e-3))))


def reference_head(torch, qkv, causal):
    """softmax(q k^T / sqrt(d) + mask) v for batch 0, head 0 (which reads K/V head 0 under GQA
    too), in float64 on the GPU, in row chunks so that the score matrix never needs more than
    ~128 MB. Causal shapes are square (run_shape refuses the others)."""
    q, k, v = (t[0, 0].double() for t in qkv)
    s, d = q.shape
    sk = k.shape[0]
    scale = 1.0 / math.sqrt(d)
    chunk = max(1, (128 << 20) // (8 * sk))
    out = torch.empty_like(q)
    cols = torch.arange(sk, device=q.device)
    for r0 in range(0, s, chunk):
        scores = (q[r0:r0 + chunk] @ k.T) * scale
        if causal:  # square, so top-left and bottom-right alignment agree
            rows = torch.arange(r0, min(r0 + chunk, s), device=q.device)
            scores.masked_fill_(cols[None, :] > rows[:, None], float("-inf"))
        out[r0:r0 + chunk] = torch.softmax(scores, dim=-1) @ v
    return out


def reference_head_grads(torch, sets0, causal, with_grads):
    """(O, (dQ, dK, dV)) of batch 0, head 0 in float64 for the loss sum(O * dO), in row chunks
    (as reference_head): per chunk P = softmax(q k^T / sqrt(d) + mask), dV += P^T dO,
    dS = P * (dO v^T - rowsum(dO * O)), dQ = dS k / sqrt(d), dK += dS^T q / sqrt(d). The
    gradients are None when not `with_grads` (GQA)."""
    q, k, v, d_o = (t[0, 0].detach().double() for t in sets0)
    s, d = q.shape
    sk = k.shape[0]
    scale = 1.0 / math.sqrt(d)
    chunk = max(1, (128 << 20) // (8 * sk))
    cols = torch.arange(sk, device=q.device)
    out = torch.empty_like(q)
    dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for r0 in range(0, s, chunk):
        r1 = min(r0 + chunk, s)
        scores = (q[r0:r1] @ k.T) * scale
        if causal:  # square, so top-left and bottom-right alignment agree
            rows = torch.arange(r0, r1, device=q.device)
            scores.masked_fill_(cols[None, :] > rows[:, None], float("-inf"))
        p = torch.softmax(scores, dim=-1)
        del scores
        out[r0:r1] = p @ v
        if not with_grads:
            continue
        g = d_o[r0:r1]
        dv += p.T @ g
        ds = p * (g @ v.T - (g * out[r0:r1]).sum(dim=-1, keepdim=True))
        del p
        dq[r0:r1] = (ds @ k) * scale
        dk += (ds.T @ q[r0:r1]) * scale
    return out, ((dq, dk, dv) if with_grads else None)


def rel_error(torch, out, ref):
    if ref is None:
        return None
    diff = torch.linalg.vector_norm(out.double() - ref)
    return float(diff / torch.linalg.vector_norm(ref))


if __name__ == "__main__":
    main()
