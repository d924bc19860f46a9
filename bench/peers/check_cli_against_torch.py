#!/usr/bin/env python3
"""Checks `flashcore run` against PyTorch's float64 SDPA, with the oracle's tolerance rule.

Usage (on a machine with a GPU, torch and a built `flashcore` binary):
  python3 bench/peers/check_cli_against_torch.py --flashcore target/release/flashcore \
      [--kernels scalar,vectorized,...] [--shape 2,8,300,280,64] [--heads-kv 2] [--causal] [--dtype f16]

Inputs are fresh random normals rounded to the dtype and saved as float32 .npy in BSHD; each
kernel's output is compared with float64 SDPA (explicit bottom-right causal mask, GQA by
repeating K/V heads). The rule, the same one flashcore-oracle applies (docs/ORACLE.md):
  max|out - ref64| <= 2 * max|lowp - ref64| + floor
where lowp is PyTorch's own SDPA math in the dtype (the "plain fp16/bf16 implementation") and the
floor is one ulp at 0.3 (2^-12 for f16, 2^-9 for bf16). Exits 1 if any kernel fails.
"""
import argparse, subprocess, sys, tempfile, os
import numpy as np

FLOOR = {"f16": 2.0 ** -12, "bf16": 2.0 ** -9}


def reference(q, k, v, causal, scale, dtype, torch):
    """SDPA on B,H,S,D tensors in `dtype`, with a bottom-right causal mask."""
    sq, sk = q.shape[2], k.shape[2]
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    mask = None
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        mask = j <= i + (sk - sq)
    from torch.nn.attention import sdpa_kernel, SDPBackend
    with sdpa_kernel(SDPBackend.MATH):
        return torch.nn.functional.scaled_dot_product_attention(
            q.to(dtype), k.to(dtype), v.to(dtype), attn_mask=mask, scale=scale)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flashcore", default="target/release/flashcore")
    ap.add_argument("--kernels", default="auto")
    ap.add_argument("--shape", default="2,8,300,280,64", help="batch,heads_q,seq_q,seq_k,head_dim")
    ap.add_argument("--heads-kv", type=int, default=0)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch is not installed: cannot compare", file=sys.stderr)
        return 3
    b, hq, sq, sk, d = (int(x) for x in a.shape.split(","))
    hkv = a.heads_kv or hq
    tdtype = torch.float16 if a.dtype == "f16" else torch.bfloat16
    g = torch.Generator().manual_seed(a.seed)
    # BSHD, rounded to the kernel dtype so both sides see the same numbers.
    q = torch.randn(b, sq, hq, d, generator=g).to(tdtype).float()
    k = torch.randn(b, sk, hkv, d, generator=g).to(tdtype).float()
    v = torch.randn(b, sk, hkv, d, generator=g).to(tdtype).float()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    bhsd = lambda t: t.permute(0, 2, 1, 3).to(dev)
    scale = d ** -0.5
    ref = reference(bhsd(q), bhsd(k), bhsd(v), a.causal, scale, torch.float64, torch).cpu()
    lowp = reference(bhsd(q), bhsd(k), bhsd(v), a.causal, scale, tdtype, torch).double().cpu()
    lowp_err = (lowp - ref).abs().max().item()
    allowed = 2 * lowp_err + FLOOR[a.dtype]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        paths = {n: os.path.join(tmp, f"{n}.npy") for n in "qkv"}
        for n, t in zip("qkv", (q, k, v)):
            np.save(paths[n], t.numpy().astype(np.float32))
        print(f"shape B,Hq,Hkv,Sq,Sk,D = {b},{hq},{hkv},{sq},{sk},{d} {a.dtype} causal={a.causal}; "
              f"torch {torch.__version__} low-precision error {lowp_err:.3e}, allowed {allowed:.3e}")
        for kernel in a.kernels.split(","):
            out = os.path.join(tmp, f"o_{kernel}.npy")
            cmd = [a.flashcore, "run", "--kernel", kernel, "--q", paths["q"], "--k", paths["k"],
                   "--v", paths["v"], "--out", out, "--dtype", a.dtype, "--layout", "bshd"]
            if a.causal:
                cmd.append("--causal")
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{kernel:>20}: FAIL flashcore exited {r.returncode}: {r.stderr.strip()}")
                failed += 1
                continue
            o = torch.from_numpy(np.load(out)).double().permute(0, 2, 1, 3)
            err = (o - ref).abs().max().item()
            ok = err <= allowed and not torch.isnan(o).any().item()
            failed += not ok
            print(f"{kernel:>20}: {'PASS' if ok else 'FAIL'} max abs error {err:.3e} "
                  f"(ratio {err / allowed:.3f} of allowed) [{r.stderr.strip()}]")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
