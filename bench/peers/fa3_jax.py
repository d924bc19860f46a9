#!/usr/bin/env python3
"""Times FlashAttention-3 (Hopper kernels) through the `flash_attn3_jax` wheel, for
`cargo xtask bench-all`, in its own process (JAX and torch do not share a runtime).

    python3 bench/peers/fa3_jax.py --shapes shapes.json --out peers-fa3.json [--quick]
        [--decode | --backward] [--l2-bytes N] [--backends ...]

Input: the same shapes file as torch_sdpa.py: a JSON list of {"batch", "heads", "seq",
"head_dim", "causal", "dtype": "f16"|"bf16"} (or {"shapes": [...]}), each optionally with
"heads_kv" (GQA: K/V heads dividing "heads") and "seq_k" (keys per sequence). Inputs are random
normal in FA3's own layout B,S,H,D (what the anchor file h100-fa3-jax-fp16.txt used), scale
1/sqrt(head_dim). GQA is FA3's native GQA (no K/V copies). Causal is FA3's bottom-right aligned
mask, which is flashcore's: unlike SDPA, causal rows with seq_k != seq are timed too.

Output: the schema of torch_sdpa.py, backend "fa3":
    {"device", "jax", "jaxlib", "flash_attn3_jax", "runtime": "jax", "l2_bytes", "quick",
     "decode", "backward", "method": str, "skipped": [], "complete": bool (the file is
     rewritten after every shape; false: the run died part way), "rows": [{<shape fields>,
     "backend": "fa3", "method": "eager"|"graph", "us", "tflops", "rel", "calls", "repeats",
     "sets", "num_splits", "note", ["gbps"]} | {<shape fields>, "backend": "fa3", "error": str}]}
    (--backward rows: see below.)

Timing (wall clock; JAX has no CUDA events or torch graphs):
  - "graph" row: ONE jitted executable runs the attention `calls` times: a lax.fori_loop whose
    body calls FA3 once per input set (sets rotated, bytes > 2x L2 as torch_sdpa.py does). Each
    set's q is loop-carried and element [0,0,0,0] of it is replaced by that of the set's previous
    output before each call (lax.dynamic_update_slice, in place: one tiny kernel per call), so
    every call depends on the one before: XLA can neither hoist the calls out of the loop (it
    does for loop-invariant inputs, even behind lax.optimization_barrier) nor merge them (CSE),
    and the outputs are carried, so not dead. Wall clock around one execution after
    block_until_ready, divided by the calls; the median of `repeats` executions. Host dispatch
    is paid once per execution (>= 20 ms), so this is the kernels' back-to-back time plus the
    one-element update (~1-2 us of GPU time per call): the counterpart of torch's CUDA-graph
    replays (reported under "graph"; the note says what it is). "loop_copies" counts the copy
    instructions in the executable's optimized HLO (a full-size copy per call would show).
  - "eager" row: back-to-back calls of a jitted single call from Python (per-call dispatch,
    the anchor file's method), `calls` per sample (>= 20 ms), median of `repeats`.
  The graph row is left out (with a note) if it is not faster than the eager one, so the time
  the report takes is always the faster honest one.
  - num_splits: the wheel's flash_mha always runs FA3 with num_splits=1, and its
    flash_mha_with_kvcache takes an explicit num_splits (FA3's own heuristic is not reachable
    from JAX). When a shape has fewer query tiles than SMs (decode, small prefill), splits of
    1, 2, 4, ... are each timed briefly and the fastest is measured in full (what FA3's heuristic
    would aim for); the row says which in "num_splits".
    FA3_JAX_SPLITS=1 (or a comma list) in the environment replaces the search.
  - "rel": ||out - ref|| / ||ref|| on batch 0, head 0 against a float32 reference computed in
    JAX (HIGHEST precision matmuls).

--decode: the decode method of torch_sdpa.py: >= 3 input sets, 30 calls per execution, 11
executions, the median per call as the "graph" row (plus the eager row); rows carry "gbps"
(K and V bytes read / time).

--backward (`cargo xtask bench-all --pass bwd | fwdbwd`): FA3's backward, the method of the
backward anchor files (shared/anchors/h200-peers.txt: "jax.grad of flash_mha, wall clock, bwd =
fwd+bwd minus fwd"; h100-backward-peers.txt: "jax.grad of sum(O*dO), wall clock around jitted
calls after block_until_ready, minus the forward the same way") with this script's sampling.
Each input set is (q, k, v, dO), dO random normal of q's shape. Two jitted functions:
    fwd     = flash_mha(q, k, v)                                         (the forward alone)
    fwd+bwd = jax.grad(lambda q, k, v: sum(flash_mha(q, k, v) * dO), argnums=(0, 1, 2))
(the loss's value is dead, so XLA keeps FA3's forward, whose O and LSE the backward needs, and
FA3's backward with dO as O's cotangent). Samples of each alternate (a drift of clocks hits both
alike), each one the eager method above: wall clock around back-to-back calls lasting >= 20 ms
after block_until_ready, sets rotated past 2x L2 (a set counts Q, K, V, O, dO, dQ, dK, dV);
"fwd_us" and "fwdbwd_us" are the medians of `repeats` samples and "bwd_us" = fwdbwd_us - fwd_us.
One "eager" row per shape, as torch_sdpa.py --backward writes: "fwd_us", "fwdbwd_us", "bwd_us",
"tflops" on 2.5x the forward FLOPs (of bwd_us), "fwdbwd_tflops" on 3.5x, "rel" of the output
and "grad_rel" {"dq", "dk", "dv"} of batch 0, head 0 against float32 gradients of sum(O * dO)
(null under GQA), "calls" (fwd+bwd calls per sample), "calls_fwd", "repeats", "sets",
"num_splits" (1: flash_mha's) and "note". No graph rows, no num_splits search.

Exit status: 0 on success (even if some rows are errors), 2 for bad arguments (--decode with
--backward) or a malformed shapes file, 3 when jax, flash_attn3_jax or a GPU is missing (one
line on stderr says which).
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

from peer_shapes import fail, flops, kv_bytes, load_shapes  # shared with torch_sdpa.py

DECODE_SETS = 3
DECODE_CALLS = 30
DECODE_REPEATS = 11
DEFAULT_L2 = 50 * 1024 * 1024  # H100; JAX does not expose the L2 size
MAX_CALLS_PER_EXEC = 20_000
SPLIT_CANDIDATES = (1, 2, 4, 8, 16, 32, 64)
BACKEND = "fa3"
FORWARD_METHOD = ("graph = one jitted lax.fori_loop of many FA3 calls on rotated input sets "
                  "(each call's q loop-carried, one element updated from the previous output), "
                  "wall clock / calls, median; eager = back-to-back jitted calls from Python, "
                  "wall clock / calls, median; graph reported only where faster")
BACKWARD_METHOD = ("fwd = jitted flash_mha, fwd+bwd = jitted jax.grad of sum(flash_mha(q, k, v) "
                   "* dO) w.r.t. q, k, v; alternating samples of each, wall clock around "
                   "back-to-back calls after block_until_ready / calls, medians; bwd = fwd+bwd "
                   "- fwd")


def calls_for(us_per_call, target_ms):
    return max(1, min(MAX_CALLS_PER_EXEC, math.ceil(target_ms * 1e3 / max(us_per_call, 1e-3))))


def short_error(e):
    lines = str(e).strip().splitlines()
    first = lines[0] if lines else ""
    # XLA errors put the useful part after a long prefix; keep the first line, cut.
    return f"{type(e).__name__}: {first}"[:1000]


def finite_or_null(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite_or_null(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite_or_null(v) for v in x]
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", required=True, help="JSON list of shapes")
    ap.add_argument("--out", required=True, help="where to write the results JSON")
    ap.add_argument("--quick", action="store_true", help="smoke mode: few, short samples")
    ap.add_argument("--decode", action="store_true",
                    help=f">= {DECODE_SETS} sets, {DECODE_CALLS} calls per execution, "
                         f"{DECODE_REPEATS} executions")
    ap.add_argument("--backward", action="store_true",
                    help="time fwd and jax.grad of sum(O * dO) (fwd + bwd), both jitted; "
                         "bwd = the difference of the medians")
    ap.add_argument("--l2-bytes", type=int, default=DEFAULT_L2,
                    help="L2 size for the input rotation (default 50 MiB, the H100's)")
    ap.add_argument("--backends", default=None,
                    help="accepted for symmetry with torch_sdpa.py: only 'fa3' is timed here")
    args = ap.parse_args()
    if args.backends is not None:
        wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
        if BACKEND not in wanted:
            fail(2, f"--backends {args.backends}: this script only times '{BACKEND}'")
    if args.decode and args.backward:
        fail(2, "--decode and --backward do not go together")
    shapes = load_shapes(args.shapes)

    # Before jax is imported: JAX must not grab most of the GPU (another process, flashcore's
    # bench, holds a context on it).
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
        import jax.numpy as jnp  # noqa: F401
    except Exception as e:
        fail(3, f"jax is not available: {type(e).__name__}: {e}")
    try:
        import flash_attn3_jax
    except Exception as e:
        fail(3, f"flash_attn3_jax is not available: {type(e).__name__}: {e}")
    # FA3_JAX_PLATFORM=cpu: a test hook only (a stand-in flash_attn3_jax on CPU JAX checks the
    # script's plumbing without a GPU); real runs use the GPU.
    platform = os.environ.get("FA3_JAX_PLATFORM", "gpu")
    try:
        gpus = jax.devices(platform)
    except Exception as e:
        fail(3, f"jax {jax.__version__} sees no GPU: {type(e).__name__}: {e}")
    if not gpus:
        fail(3, f"jax {jax.__version__} sees no GPU")

    bench = Bench(jax, flash_attn3_jax, gpus[0], quick=args.quick, decode=args.decode,
                  l2_bytes=args.l2_bytes, backward=args.backward)
    try:
        import jaxlib
        jaxlib_version = jaxlib.__version__
    except Exception:
        jaxlib_version = None
    result = {
        "device": getattr(bench.device, "device_kind", str(bench.device)),
        "jax": jax.__version__,
        "jaxlib": jaxlib_version,
        "flash_attn3_jax": getattr(flash_attn3_jax, "__version__", "?"),
        "runtime": "jax",
        "sm_count": bench.sm_count,
        "l2_bytes": bench.l2_bytes,
        "quick": args.quick,
        "decode": args.decode,
        "backward": args.backward,
        "method": BACKWARD_METHOD if args.backward else FORWARD_METHOD,
        "skipped": [],
        "complete": False,
        "rows": [],
    }
    for i, shape in enumerate(shapes):
        shape_rows = bench.run_shape(shape)
        result["rows"].extend(shape_rows)
        for r in shape_rows:
            if "error" in r:
                what = r["error"]
            elif args.backward:
                what = (f"fwd {r['fwd_us']:.1f} us, fwd+bwd {r['fwdbwd_us']:.1f} us, "
                        f"bwd {r['bwd_us']:.1f} us rel {r['rel']} grad_rel {r['grad_rel']}")
            else:
                what = (f"{r['us']:.1f} us {r['tflops']:.1f} TFLOPS rel {r['rel']}"
                        f" splits {r.get('num_splits')}")
            if "gbps" in r:
                what += f" {r['gbps']:.0f} GB/s"
            print(f"[fa3-jax] {shape} {r['backend']}/{r.get('method', '-')}: {what}",
                  file=sys.stderr)
        # Written after every shape: a crash later (a CUDA fault kills the process) keeps the
        # rows so far, which the caller reads with "complete": false.
        result["complete"] = i + 1 == len(shapes)
        write_json(args.out, result)
    if not shapes:
        result["complete"] = True
        write_json(args.out, result)


def write_json(path, result):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(finite_or_null(result), f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


class Bench:
    def __init__(self, jax, fa3, device, quick, decode, l2_bytes, backward=False):
        self.jax = jax
        self.jnp = jax.numpy
        self.fa3 = fa3
        self.device = device
        self.quick = quick
        self.decode = decode
        self.l2_bytes = l2_bytes
        self.backward = backward
        self.target_ms = 2.0 if quick else 20.0
        self.repeats = 5 if quick else 15
        self.sm_count = int(getattr(device, "core_count", 0) or 132)

    def free_bytes(self):
        try:
            st = self.device.memory_stats() or {}
            limit = st.get("bytes_limit") or 0
            used = st.get("bytes_in_use") or 0
            if limit > used:
                return limit - used
        except Exception:
            pass
        return 60 * 1024 ** 3

    # ---- the attention calls ---------------------------------------------------------------

    def attn_fn(self, causal, num_splits):
        """fn(q, k, v) -> out, all B,S,H,D."""
        fa3 = self.fa3
        if num_splits == 1:
            return lambda q, k, v: fa3.flash_mha(q, k, v, is_causal=causal)
        return lambda q, k, v: fa3.flash_mha_with_kvcache(
            q, k, v, is_causal=causal, num_splits=num_splits)

    def split_candidates(self, shape):
        """[1] when the query tiles alone fill the SMs, else 1 and powers of two while each
        split keeps at least one 128-key tile."""
        b, h, hkv, s, sk = (shape["batch"], shape["heads"], shape["heads_kv"], shape["seq"],
                            shape["seq_k"])
        group = h // hkv
        # FA3 packs GQA heads into the query tile when Sq is small: count the smaller of both.
        tiles = min(b * h * math.ceil(s / 128), b * hkv * math.ceil(s * group / 128))
        if tiles >= self.sm_count:
            return [1]
        max_split = max(1, math.ceil(sk / 128))
        cands = [n for n in SPLIT_CANDIDATES if n <= max_split]
        forced = os.environ.get("FA3_JAX_SPLITS")  # e.g. "1": no search (see the docstring)
        if forced:
            return [int(x) for x in forced.split(",") if x.strip()]
        if self.quick:
            # One guess besides 1: enough splits to fill the SMs once.
            guess = min((n for n in cands if tiles * n >= self.sm_count), default=cands[-1])
            cands = sorted({1, guess})
        return cands

    # ---- one shape ---------------------------------------------------------------------------

    def run_shape(self, shape):
        jax, jnp = self.jax, self.jnp
        b, h, s, d = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"]
        hkv, sk = shape["heads_kv"], shape["seq_k"]
        causal = shape["causal"]
        dtype = jnp.float16 if shape["dtype"] == "f16" else jnp.bfloat16
        if causal and sk < s:
            return [dict(shape, backend=BACKEND,
                         error="causal with seq_k < seq: the bottom-right mask leaves query rows "
                               "with no keys")]
        try:
            sets = self.input_sets(b, h, hkv, s, sk, d, dtype)
        except Exception as e:
            return [dict(shape, backend=BACKEND, error=f"allocating inputs: {short_error(e)}")]
        try:
            try:
                if self.backward:
                    # dK, dV of K/V head 0 sum over its query heads: head 0 alone is the whole
                    # gradient only without GQA.
                    ref = reference_head_grads(jax, sets[0], causal, hkv == h)
                else:
                    ref = reference_head(jax, sets[0], causal)
            except Exception as e:
                print(f"[fa3-jax] {shape}: no float32 reference ({short_error(e)}); rel = null",
                      file=sys.stderr)
                ref = None
            if self.backward:
                return self.time_backward(shape, sets, ref)
            return self.time_shape(shape, sets, ref)
        except Exception as e:
            return [dict(shape, backend=BACKEND, error=short_error(e))]
        finally:
            del sets
            try:
                jax.clear_caches()  # compiled executables per shape: do not pile up
            except Exception:
                pass

    def input_sets(self, b, h, hkv, s, sk, d, dtype):
        """Independent (q, k, v) sets, B,S,H,D, enough that rotating through them touches more
        than twice the L2 (each call also writes an output of q's size), within a quarter of
        free memory. --backward: (q, k, v, dO) sets; a call also writes O and dQ, dK, dV."""
        jax = self.jax
        q_elems, kv_elems = b * h * s * d, b * hkv * sk * d
        if self.backward:
            set_bytes = (4 * q_elems + 4 * kv_elems) * 2
        else:
            set_bytes = (2 * q_elems + 2 * kv_elems) * 2
        want = max(DECODE_SETS if self.decode else 2,
                   math.ceil(2 * self.l2_bytes / set_bytes) + 1)
        fit = max(1, int(0.25 * self.free_bytes()) // set_bytes)
        n = min(want, fit, 2 if self.quick and not self.decode else 1000)
        key = jax.random.PRNGKey(0)
        sets = []
        for _ in range(n):
            key, kq, kk, kv, ko = jax.random.split(key, 5)
            one = (jax.random.normal(kq, (b, s, h, d), dtype),
                   jax.random.normal(kk, (b, sk, hkv, d), dtype),
                   jax.random.normal(kv, (b, sk, hkv, d), dtype))
            if self.backward:
                one += (jax.random.normal(ko, (b, s, h, d), dtype),)
            sets.append(one)
        jax.block_until_ready(sets)
        return sets

    def time_shape(self, shape, sets, ref):
        jax = self.jax
        causal = shape["causal"]
        note = []
        # Which num_splits: each candidate checked and timed briefly, the fastest kept.
        cands = self.split_candidates(shape)
        best, rel, errors, jitted = None, None, [], {}
        for n in cands:
            try:
                fn = self.attn_fn(causal, n)
                one = jax.jit(fn)
                out = one(*sets[0])
                out.block_until_ready()
                r = rel_error(jax, out, ref)
                del out
                if r is not None and not r < 0.05:
                    errors.append(f"num_splits={n}: wrong (rel {r:.2e})")
                    continue
                jitted[n] = (fn, one)
                if len(cands) == 1:
                    best, rel = (n, None), r
                    break
                probe = self.make_loop(fn, sets, max(1, math.ceil(8 / len(sets))))
                us = self.sample_loop(probe, sets, 3)[0]
                del probe
                print(f"[fa3-jax] {shape}: num_splits={n}: {us:.1f} us (probe)", file=sys.stderr)
                if best is None or us < best[1]:
                    best, rel = (n, us), r
            except Exception as e:
                errors.append(f"num_splits={n}: {short_error(e)}")
        if best is None:
            raise RuntimeError("; ".join(errors) or "no num_splits ran")
        splits = best[0]
        if len(cands) > 1:
            note.append(f"num_splits={splits} (fastest of {','.join(map(str, cands))})")
        if errors:
            note.append("; ".join(errors)[:300])
        fn, one = jitted[splits]
        base = dict(shape, backend=BACKEND, rel=rel, sets=len(sets), num_splits=splits)

        # Eager: per-call dispatch of one jitted call.
        est = self.time_eager(one, sets, calls=3, repeats=1)
        if self.decode:
            calls_e, reps = DECODE_CALLS, (3 if self.quick else DECODE_REPEATS)
        else:
            calls_e, reps = calls_for(est, self.target_ms), self.repeats
        us_e = self.time_eager(one, sets, calls_e, reps)

        # Graph: one jitted loop of many calls, sized so that one execution lasts the sample
        # length (rebuilt once if the eager estimate, which includes dispatch, was far off).
        nsets = len(sets)
        if self.decode:
            iters = max(1, math.ceil(DECODE_CALLS / nsets))
        else:
            iters = max(1, math.ceil(calls_for(us_e, self.target_ms) / nsets))
        loop = self.make_loop(fn, sets, iters)
        if not self.decode:
            us_probe = self.sample_loop(loop, sets, 1)[0]
            want = max(1, math.ceil(calls_for(us_probe, self.target_ms) / nsets))
            if want > 1.5 * iters:
                del loop
                iters = want
                loop = self.make_loop(fn, sets, iters)
        copies = loop[2]
        us_g, calls_g = self.sample_loop(loop, sets, reps)
        del loop
        rows = []
        eager = dict(base, method="eager", us=us_e, tflops=flops(shape) / us_e / 1e6,
                     calls=calls_e, repeats=reps)
        rows.append(eager)
        if us_g < us_e:
            rows.append(dict(base, method="graph", us=us_g, tflops=flops(shape) / us_g / 1e6,
                             calls=calls_g, repeats=reps, loop_copies=copies))
            lnote = (f"graph = {calls_g} calls in one jitted lax.fori_loop (XLA, not a CUDA "
                     "graph; + a 1-element q update per call)")
            if copies:
                lnote += f"; XLA put {copies} copy op(s) in it"
            note.append(lnote)
        else:
            note.append(f"the jitted loop ({us_g:.2f} us/call, {calls_g} calls) was not faster "
                        "than per-call dispatch: eager reported")
        for r in rows:
            if note:
                r["note"] = "; ".join(note)
            if self.decode:
                r["gbps"] = kv_bytes(shape) / r["us"] / 1e3
        return rows

    def time_backward(self, shape, sets, ref):
        """--backward: the first calls checked (O and dQ, dK, dV against `ref`, gradients
        finite), then alternating samples of the jitted forward and the jitted jax.grad of
        sum(O * dO); one "eager" row with fwd_us, fwdbwd_us and bwd_us = their difference."""
        jax, jnp = self.jax, self.jnp
        causal = shape["causal"]
        fwd_fn, grad_fn = backward_fns(jax, self.fa3, causal)
        fwd = jax.jit(fwd_fn)
        fwd_grad = jax.jit(grad_fn)
        q, k, v, d_o = sets[0]
        out = fwd(q, k, v, d_o)
        grads = fwd_grad(q, k, v, d_o)
        jax.block_until_ready((out, grads))
        ref_out, ref_grads = ref if ref is not None else (None, None)
        rel = rel_error(jax, out, ref_out)
        grad_rel = None
        if ref_grads is not None:
            grad_rel = {n: rel_error(jax, g, r)
                        for n, g, r in zip(("dq", "dk", "dv"), grads, ref_grads)}
        finite = all(bool(jnp.isfinite(g).all()) for g in grads)
        del out, grads
        if not finite:
            return [dict(shape, backend=BACKEND, rel=rel, grad_rel=grad_rel,
                         error="non-finite gradients on the first call")]

        calls_f = calls_for(self.time_eager(fwd, sets, calls=3, repeats=1), self.target_ms)
        calls_fb = calls_for(self.time_eager(fwd_grad, sets, calls=3, repeats=1),
                             self.target_ms)
        fwd_samples, fb_samples = [], []
        for _ in range(self.repeats):  # alternating: a drift of clocks hits both alike
            fwd_samples.append(self.time_eager(fwd, sets, calls_f, 1))
            fb_samples.append(self.time_eager(fwd_grad, sets, calls_fb, 1))
        fwd_us = statistics.median(fwd_samples)
        fb_us = statistics.median(fb_samples)
        bwd_us = fb_us - fwd_us
        f = flops(shape)
        note = "JAX wall clock around jitted calls (no CUDA events)"
        return [dict(shape, backend=BACKEND, method="eager", fwd_us=fwd_us, fwdbwd_us=fb_us,
                     bwd_us=bwd_us,
                     tflops=2.5 * f / bwd_us / 1e6 if bwd_us > 0 else None,
                     fwdbwd_tflops=3.5 * f / fb_us / 1e6, rel=rel, grad_rel=grad_rel,
                     calls=calls_fb, calls_fwd=calls_f, repeats=self.repeats, sets=len(sets),
                     num_splits=1, note=note)]

    # ---- timing ------------------------------------------------------------------------------

    def time_eager(self, one, sets, calls, repeats):
        """Median over `repeats` samples of wall clock around `calls` back-to-back calls of a
        jitted single call (inputs rotated), after block_until_ready, per call in us. `one`
        may return an array or a tuple of them (the gradients)."""
        jax = self.jax
        out = one(*sets[0])
        jax.block_until_ready(out)
        samples, i = [], 0
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                out = one(*sets[i % len(sets)])
                i += 1
            jax.block_until_ready(out)
            samples.append((time.perf_counter() - t0) * 1e6 / calls)
        return statistics.median(samples)

    def make_loop(self, fn, sets, iters):
        """A compiled executable of the sets running `iters` loop iterations of one call per
        set (iters * nsets calls), returning the last output of each set: (executable, calls
        per execution, copy instructions in its optimized HLO or None)."""
        jax, lax = self.jax, self.jax.lax
        jnp = self.jnp

        def run(sets):
            qs = tuple(q for q, _, _ in sets)
            outs = tuple(jnp.zeros(q.shape, q.dtype) for q in qs)

            def body(_, carry):
                qs, outs = carry
                new_q, new_o = [], []
                for (_, k, v), q, prev in zip(sets, qs, outs):
                    # A real data dependency on the previous iteration, which no compiler pass
                    # may remove: element [0,0,0,0] of q (a loop-carried copy of the set's q)
                    # becomes that of the set's last output. One tiny in-place update kernel
                    # per call (XLA hoists calls on loop-invariant inputs out of the loop, even
                    # behind an optimization_barrier); the outputs are carried, so not dead.
                    q = lax.dynamic_update_slice(q, prev[:1, :1, :1, :1], (0, 0, 0, 0))
                    new_q.append(q)
                    new_o.append(fn(q, k, v))
                return tuple(new_q), tuple(new_o)

            return lax.fori_loop(0, iters, body, (qs, outs))[1]

        compiled = jax.jit(run).lower(tuple(sets)).compile()
        return compiled, iters * len(sets), count_copies(compiled)

    def sample_loop(self, loop, sets, repeats):
        """(median us per call, calls per execution) of `repeats` executions of `loop` (from
        make_loop), each timed by wall clock from dispatch to block_until_ready; one untimed
        warm-up first."""
        jax = self.jax
        compiled, calls, _ = loop
        sets = tuple(sets)
        jax.block_until_ready(compiled(sets))
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = compiled(sets)
            jax.block_until_ready(out)
            samples.append((time.perf_counter() - t0) * 1e6 / calls)
            del out
        return statistics.median(samples), calls


def count_copies(compiled):
    """How many copy instructions XLA's optimized HLO has (a copy of an output or input per
    call would add memory traffic to the loop's time); None if the text is not available."""
    try:
        text = compiled.as_text()
    except Exception:
        return None
    if not text:
        return None
    n = 0
    for line in text.splitlines():
        line = line.strip()
        if " copy(" in line or " copy-start(" in line:
            n += 1
    return n


def masked_scores(jax, qc, k, r0, s, scale, causal):
    """q k^T * scale in float32 (HIGHEST precision) for the query rows r0.. of a chunk of a
    sequence of s rows, -inf above the bottom-right aligned causal diagonal when `causal`."""
    jnp = jax.numpy
    sk = k.shape[0]
    scores = jnp.matmul(qc, k.T, precision=jax.lax.Precision.HIGHEST) * scale
    if causal:
        r = r0 + jnp.arange(qc.shape[0])[:, None]
        c = jnp.arange(sk)[None, :]
        scores = jnp.where(c > r + (sk - s), -jnp.inf, scores)
    return scores


def reference_head(jax, qkv, causal):
    """softmax(q k^T / sqrt(d) + mask) v for batch 0, head 0 (K/V head 0 under GQA too) in
    float32 with HIGHEST precision matmuls, rows in chunks of <= ~128 MB of scores. The causal
    mask is bottom-right aligned (FA3's and flashcore's)."""
    jnp = jax.numpy
    q = qkv[0][0, :, 0, :].astype(jnp.float32)
    k = qkv[1][0, :, 0, :].astype(jnp.float32)
    v = qkv[2][0, :, 0, :].astype(jnp.float32)
    s, d = q.shape
    sk = k.shape[0]
    scale = 1.0 / math.sqrt(d)
    chunk = max(1, (128 << 20) // (4 * sk))
    hi = jax.lax.Precision.HIGHEST

    @jax.jit
    def rows(qc, k, v, r0):
        scores = masked_scores(jax, qc, k, r0, s, scale, causal)
        return jnp.matmul(jax.nn.softmax(scores, axis=-1), v, precision=hi)

    parts = [rows(q[r0:r0 + chunk], k, v, r0) for r0 in range(0, s, chunk)]
    return jnp.concatenate(parts, axis=0)


def backward_fns(jax, fa3, causal):
    """(fwd, fwd_grad) of (q, k, v, dO), to be jitted: the forward alone (dO unused), and the
    gradients (dQ, dK, dV) of sum(flash_mha(q, k, v) * dO), which run FA3's forward and its
    backward with dO as O's cotangent (the loss value itself is dead code under jax.grad)."""
    jnp = jax.numpy

    def fwd(q, k, v, d_o):
        return fa3.flash_mha(q, k, v, is_causal=causal)

    def loss(q, k, v, d_o):
        return jnp.sum(fa3.flash_mha(q, k, v, is_causal=causal) * d_o)

    return fwd, jax.grad(loss, argnums=(0, 1, 2))


def reference_head_grads(jax, sets0, causal, with_grads):
    """(O, (dQ, dK, dV)) of batch 0, head 0 in float32 (HIGHEST precision matmuls) for the loss
    sum(O * dO), in row chunks as reference_head: per chunk P = softmax(q k^T / sqrt(d) + mask),
    O = P v, dV += P^T dO, dS = P * (dO v^T - rowsum(dO * O)), dQ = dS k / sqrt(d),
    dK += dS^T q / sqrt(d). The causal mask is bottom-right aligned. Gradients are None when
    not `with_grads` (GQA)."""
    jnp = jax.numpy
    q, k, v, d_o = (t[0, :, 0, :].astype(jnp.float32) for t in sets0)
    s, d = q.shape
    sk = k.shape[0]
    scale = 1.0 / math.sqrt(d)
    chunk = max(1, (128 << 20) // (8 * sk))
    hi = jax.lax.Precision.HIGHEST

    @jax.jit
    def rows(qc, gc, k, v, r0):
        p = jax.nn.softmax(masked_scores(jax, qc, k, r0, s, scale, causal), axis=-1)
        o = jnp.matmul(p, v, precision=hi)
        dv = jnp.matmul(p.T, gc, precision=hi)
        ds = p * (jnp.matmul(gc, v.T, precision=hi) - jnp.sum(gc * o, axis=-1, keepdims=True))
        # A fully masked row would be NaN; bottom-right causal rows with seq_k >= seq have keys.
        dq = jnp.matmul(ds, k, precision=hi) * scale
        dk = jnp.matmul(ds.T, qc, precision=hi) * scale
        return o, dq, dk, dv

    outs, dqs = [], []
    dk = jnp.zeros_like(k)
    dv = jnp.zeros_like(v)
    for r0 in range(0, s, chunk):
        o, dq_c, dk_c, dv_c = rows(q[r0:r0 + chunk], d_o[r0:r0 + chunk], k, v, r0)
        outs.append(o)
        dqs.append(dq_c)
        dk = dk + dk_c
        dv = dv + dv_c
    out = jnp.concatenate(outs, axis=0)
    if not with_grads:
        return out, None
    return out, (jnp.concatenate(dqs, axis=0), dk, dv)


def rel_error(jax, out, ref):
    if ref is None:
        return None
    jnp = jax.numpy
    o = out[0, :, 0, :].astype(jnp.float32)
    return float(jnp.linalg.norm(o - ref) / jnp.linalg.norm(ref))


if __name__ == "__main__":
    main()
