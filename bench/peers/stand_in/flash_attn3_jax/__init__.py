"""A stand-in for the flash-attn3-jax wheel: the same two entry points as jnp math, so that
bench/peers/fa3_jax.py can be checked on CPU JAX without a GPU:

    FA3_JAX_PLATFORM=cpu PYTHONPATH=bench/peers/stand_in:<cpu jax> python3 bench/peers/fa3_jax.py ...

or `FLASHCORE_FA3_TEST_PATH=bench/peers/stand_in:<cpu jax> FA3_JAX_PLATFORM=cpu cargo test -p
xtask fa3`. num_splits=16 is refused on purpose (an error the script must survive).
"""
import math
import jax
import jax.numpy as jnp
__version__ = "0.0-fake"

def _attn(q, k, v, is_causal):
    b, s, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    g = h // hk
    k = jnp.repeat(k, g, axis=2)
    v = jnp.repeat(v, g, axis=2)
    sc = jnp.einsum("bshd,bthd->bhst", q.astype(jnp.float32), k.astype(jnp.float32)) / math.sqrt(d)
    if is_causal:
        r = jnp.arange(s)[:, None]
        c = jnp.arange(sk)[None, :]
        sc = jnp.where(c > r + (sk - s), -jnp.inf, sc)
    p = jax.nn.softmax(sc, axis=-1)
    return jnp.einsum("bhst,bthd->bshd", p, v.astype(jnp.float32)).astype(q.dtype)

def flash_mha(q, k, v, softmax_scale=None, is_causal=False, window_size=(-1, -1)):
    return _attn(q, k, v, is_causal)

def flash_mha_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, is_causal=False, num_splits=1, **kw):
    if num_splits == 16:
        raise ValueError("fake refusal of 16 splits")
    return _attn(q, k_cache, v_cache, is_causal)
