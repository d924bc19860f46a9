"""Prefill / decode parity probe (docs/MODES.md, *Batch invariance*): one causal prompt of L
tokens through `flashcore run --batch-invariant` three ways, each on the prompt's own keys:
  prefill  the whole prompt (dense Q, K, V);
  decode   its last token alone over a KV cache holding the prompt (--seqused-k);
  chunk    its last C tokens over that cache (chunked prefill).
The decode and chunk rows are compared bit for bit with the prefill's rows of the same tokens.
Usage: python3 parity.py FLASHCORE_BIN WORKDIR  (the environment passes through to the CLI)."""
import os
import subprocess
import sys

import numpy as np

exe, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)


def run(tag, q, k, v, extra):
    paths = {}
    for name, arr in (("q", q), ("k", k), ("v", v)):
        paths[name] = os.path.join(work, f"{tag}-{name}.npy")
        np.save(paths[name], arr)
    out, lse = os.path.join(work, f"{tag}-o.npy"), os.path.join(work, f"{tag}-lse.npy")
    cmd = [exe, "run", "--q", paths["q"], "--k", paths["k"], "--v", paths["v"], "--out", out,
           "--lse", lse, "--causal", "--batch-invariant"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{tag}: rc {r.returncode}: {r.stderr.strip()}")
    return np.load(out), np.load(lse)


def differing(a, b):
    return int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))


rng = np.random.default_rng(2911)
print("| D | L | path | rows | O elements differing | LSE elements differing |")
print("|---:|---:|---|---:|---:|---:|")
for d in (64, 128):
    L, H, HKV = 1000, 8, 2
    q = rng.standard_normal((1, L, H, d)).astype(np.float16)
    k = rng.standard_normal((1, L, HKV, d)).astype(np.float16)
    v = rng.standard_normal((1, L, HKV, d)).astype(np.float16)
    o_full, lse_full = run(f"d{d}-prefill", q, k, v, [])
    used = os.path.join(work, "used.npy")
    np.save(used, np.array([L], dtype=np.int32))
    for rows in (1, 256, 600):
        tag = "decode" if rows == 1 else f"chunk {rows}"
        o, lse = run(f"d{d}-{rows}", np.ascontiguousarray(q[:, L - rows:]), k, v, ["--seqused-k", used])
        do = differing(o, np.ascontiguousarray(o_full[:, L - rows:]))
        dl = differing(lse, np.ascontiguousarray(lse_full[:, :, L - rows:]))
        print(f"| {d} | {L} | {tag} | {rows} | {do} of {o.size} | {dl} of {lse.size} |")
