"""The shapes file both peer scripts read (torch_sdpa.py and fa3_jax.py), with the counts their
rows report: one reader, so the two processes agree on what a shape is and on its FLOPs.

A shapes file is a JSON list (or {"shapes": [...]}) of objects with batch, heads, seq, head_dim,
causal and dtype, and optionally heads_kv (default heads) and seq_k (default seq). It is checked
before torch or jax is imported, so a bad file is reported as such (exit status 2) on any machine.
"""

import json
import sys

DTYPES = ("f16", "bf16")
SHAPE_KEYS = ("batch", "heads", "seq", "head_dim", "causal", "dtype")


def fail(code, message):
    print(message, file=sys.stderr)
    sys.exit(code)


def import_cuda_torch():
    """torch with a CUDA device, or exit 3 saying why not (the torch-based peers' common start)."""
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install raising something else
        fail(3, f"torch is not available: {type(e).__name__}: {e}")
    if not torch.cuda.is_available():
        fail(3, f"CUDA is not available to torch {torch.__version__} "
                f"(built for CUDA {torch.version.cuda})")
    return torch


def load_shapes(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        fail(2, f"cannot read shapes file {path}: {e}")
    if isinstance(data, dict) and "shapes" in data:
        data = data["shapes"]
    if not isinstance(data, list):
        fail(2, f"{path}: expected a JSON list of shapes")
    shapes = []
    for i, s in enumerate(data):
        if not isinstance(s, dict):
            fail(2, f"{path}: shape {i} is not an object")
        missing = [k for k in SHAPE_KEYS if k not in s]
        if missing:
            fail(2, f"{path}: shape {i} lacks {', '.join(missing)}")
        shape = {k: s[k] for k in SHAPE_KEYS}
        shape["heads_kv"] = s.get("heads_kv", shape["heads"])
        shape["seq_k"] = s.get("seq_k", shape["seq"])
        for k in ("batch", "heads", "heads_kv", "seq", "seq_k", "head_dim"):
            if not isinstance(shape[k], int) or isinstance(shape[k], bool) or shape[k] < 1:
                fail(2, f"{path}: shape {i}: {k} = {shape[k]!r} is not a positive integer")
        if not isinstance(shape["causal"], bool):
            fail(2, f"{path}: shape {i}: causal = {shape['causal']!r} is not true/false")
        if shape["dtype"] not in DTYPES:
            fail(2, f"{path}: shape {i}: dtype {shape['dtype']!r} is not one of {DTYPES}")
        if shape["heads"] % shape["heads_kv"]:
            fail(2, f"{path}: shape {i}: heads_kv {shape['heads_kv']} does not divide "
                    f"heads {shape['heads']}")
        shapes.append(shape)
    return shapes


def flops(shape):
    """4*B*H*S*S_k*D, halved when causal."""
    f = (4.0 * shape["batch"] * shape["heads"] * shape["seq"] * shape["seq_k"]
         * shape["head_dim"])
    return f / 2 if shape["causal"] else f


def kv_bytes(shape):
    """Bytes of K and V read once (2-byte elements)."""
    return 2 * shape["batch"] * shape["heads_kv"] * shape["seq_k"] * shape["head_dim"] * 2
