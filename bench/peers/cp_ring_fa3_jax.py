"""FlashAttention-3's ring attention through JAX (flash-attn3-jax's `ring_attention`, which
`flash_mha` dispatches to when Q, K and V are sharded along the sequence), timed on every
visible GPU: the peer of `cargo xtask bench-all --suite cp`.

Usage: cp_ring_fa3_jax.py --reps R ROW... where ROW is key:seq:heads_kv:causal:backward
(B=1, H=32, D=128, bf16). Prints one JSON list on its last line: per row and pass, the median ms
of the whole group, or the error that stopped it. Backward = (forward + backward) - forward.
"""

import argparse
import json
import os
import sys
import time
import traceback

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from flash_attn3_jax import flash_mha  # noqa: E402

H, D = 32, 128


def median_ms(f, reps):
    f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("rows", nargs="+")
    a = ap.parse_args()
    devices = jax.devices()
    mesh = Mesh(devices, axis_names=("seq",))
    shard = NamedSharding(mesh, P(None, "seq", None, None))
    out = []
    for row in a.rows:
        key, seq, hkv, causal, backward = row.split(":")
        seq, hkv, causal, backward = int(seq), int(hkv), causal == "1", backward == "1"
        try:
            def rnd(k, h):
                return jax.jit(
                    lambda kk: jax.random.normal(kk, (1, seq, h, D), dtype=jnp.bfloat16),
                    out_shardings=shard,
                )(jax.random.PRNGKey(k))

            q, k, v, do = rnd(1, H), rnd(2, hkv), rnd(3, hkv), rnd(4, H)
            fwd = jax.jit(lambda q, k, v: flash_mha(q, k, v, is_causal=causal))
            ms_f = median_ms(lambda: fwd(q, k, v).block_until_ready(), a.reps)
            out.append({"key": key, "pass": "fwd", "ms": ms_f, "gpus": len(devices)})
            print(f"fa3 ring {key} fwd {ms_f:.1f} ms", file=sys.stderr, flush=True)
            if backward:
                # dO is an argument, not a captured constant (XLA would embed gigabytes).
                def loss(q, k, v, do):
                    return (flash_mha(q, k, v, is_causal=causal).astype(jnp.float32) * do.astype(jnp.float32)).sum()

                both = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
                ms_b = median_ms(lambda: jax.block_until_ready(both(q, k, v, do)), a.reps)
                out.append({"key": key, "pass": "bwd", "ms": ms_b - ms_f, "gpus": len(devices)})
                print(f"fa3 ring {key} bwd {ms_b - ms_f:.1f} ms", file=sys.stderr, flush=True)
            del q, k, v, do
        except Exception as e:  # a row the peer cannot run is reported, not fatal
            traceback.print_exc()
            out.append({"key": key, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
