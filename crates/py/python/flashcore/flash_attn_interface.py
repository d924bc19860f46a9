"""FlashAttention 2's ``flash_attn_interface``, on flashcore's kernels.

The functions take FlashAttention 2's arguments with its meaning (``softmax_scale`` defaults to
``1/sqrt(head_dim)``, ``window_size=(-1, -1)`` is unbounded, ``causal`` is bottom-right aligned,
``softcap=0`` is off, ``alibi_slopes`` are fp32 ``(nheads,)`` or ``(batch, nheads)``).

An fp8 KV cache is FlashAttention 3's: :func:`flash_attn_with_kvcache`, :func:`flash_attn_func`
and :func:`flash_attn_varlen_func` take K/V (the cache) as ``torch.float8_e4m3fn`` with float32
``k_descale``/``v_descale`` of shape ``(batch, nheads_k)`` (also ``(nheads_k,)`` or one element);
the true value of a stored byte is ``float(byte) * descale[b, h_k]``, a missing descale is 1.0,
and q (so the output) stays float16/bfloat16. No backward.

FlashAttention 3's fp8 forward is :func:`flash_attn_func`'s: q, k and v all
``torch.float8_e4m3fn`` with float32 ``q_descale``/``k_descale``/``v_descale`` of one layout
(``(batch, nheads_k)``, ``(nheads_k,)`` or one element; query head h reads its KV head's
``q_descale`` entry), a missing one 1.0; the output is bfloat16. Which problems a kernel takes
(today the Hopper kernel, sm_90a: head dim 128, causal or not, GQA/MQA, no window, softcap or
ALiBi) is the kernels' to say: the rest raises ``NotImplementedError`` with their reasons. No
backward; the varlen and KV-cache functions refuse an fp8 q (``NotImplementedError``).

The dense and varlen functions (and their packed forms) are differentiable, with every mode
they take (causal, window, softcap, ALiBi); fp8 inputs, paged K/V and the KV cache are inference
only.

Beyond FlashAttention 2: every function takes ``return_softmax_lse=True`` to return
``(out, softmax_lse)`` (softmax_lse is not differentiable: no gradient flows through it). What
flashcore does not do is refused, never ignored: ``dropout_p > 0``
and ``return_attn_probs=True`` (the probabilities are never materialised) raise
``NotImplementedError``, as do rotary embeddings, ``cache_batch_idx`` and ``cache_leftpad`` in
:func:`flash_attn_with_kvcache`. Bad arguments raise ``ValueError`` with the reason.
"""

import torch
from torch import Tensor

from . import _ops
from ._ops import scale_of as _scale, window_of as _window

__all__ = [
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache",
]


def _refuse(dropout_p: float, return_attn_probs: bool) -> None:
    if dropout_p != 0.0:
        raise NotImplementedError(
            f"flashcore: dropout is not implemented (dropout_p={dropout_p}); pass dropout_p=0.0"
        )
    if return_attn_probs:
        raise NotImplementedError(
            "flashcore: return_attn_probs is not implemented (the attention probabilities are "
            "never materialised); return_softmax_lse=True returns (out, softmax_lse)"
        )


def _tensors(**named) -> torch.device:
    """Every given tensor is a tensor on one CUDA device (or ``meta``, for shape checks);
    returns that device."""
    device = None
    for name, t in named.items():
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"flashcore: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device.type not in ("cuda", "meta"):
            raise ValueError(f"flashcore: {name} must be a CUDA tensor, got one on {t.device}")
        if device is None:
            device = t.device
        elif t.device != device:
            raise ValueError(
                f"flashcore: every tensor must be on one device: {name} is on {t.device}, "
                f"the first one on {device}"
            )
    return device



def _refuse_q_descale(api: str, q_descale) -> None:
    """The varlen and KV-cache functions take no fp8 q (the Rust side refuses an e4m3 q too)."""
    if q_descale is not None:
        raise NotImplementedError(
            f"flashcore: q_descale (an fp8 q) is not implemented in {api}: the fp8 forward (q, k "
            "and v float8_e4m3fn) is flash_attn_func's; here q stays float16/bfloat16 and only "
            "K/V may be fp8 (float8_e4m3fn, with k_descale/v_descale)"
        )


def _result(out: Tensor, lse: Tensor, return_softmax_lse: bool):
    return (out, lse) if return_softmax_lse else out


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    return_softmax_lse=False,
    q_descale=None,
    k_descale=None,
    v_descale=None,
):
    """q ``(batch, seqlen_q, nheads, headdim)``; k, v ``(batch, seqlen_k, nheads_k, headdim)``
    with ``nheads`` a multiple of ``nheads_k`` (GQA/MQA). Any strides with a contiguous last
    dim. Returns out ``(batch, seqlen_q, nheads, headdim)`` (and softmax_lse
    ``(batch, nheads, seqlen_q)`` fp32 with ``return_softmax_lse``). Differentiable (causal or
    not, GQA, with a window, softcap and ALiBi); ``deterministic=True`` takes only backward
    kernels whose runs are bit-identical. k and v may be fp8 (``torch.float8_e4m3fn``, both) with
    float32 ``k_descale``/``v_descale`` ``(batch, nheads_k)`` as FlashAttention 3 takes them (a
    missing one is 1.0); such a call has no backward (``NotImplementedError`` from
    ``backward``).

    FlashAttention 3's fp8 forward: q, k and v all ``torch.float8_e4m3fn`` with float32
    ``q_descale``/``k_descale``/``v_descale`` of one layout, ``(batch, nheads_k)`` (also
    ``(nheads_k,)`` or one element; a missing one is 1.0), on q's device, each factor finite and
    > 0; the true value of an element is ``float(e4m3) * descale[b, h_k]`` (a query head reads
    its KV head's ``q_descale``). The output is bfloat16. Taken where a kernel takes it (the
    Hopper kernel, sm_90a: head dim 128, causal or not, GQA/MQA; a window, softcap or ALiBi is
    ``NotImplementedError``); inference only (``NotImplementedError`` from ``backward``)."""
    if dropout_p or return_attn_probs:
        _refuse(dropout_p, return_attn_probs)
    # The prepared path takes 16-bit Q/K/V only (an fp8 one without descales it declines itself).
    descales = q_descale is not None or k_descale is not None or v_descale is not None
    if alibi_slopes is None and not return_softmax_lse and not descales:
        out = _ops.fwd_fast(q, k, v, softmax_scale, causal, window_size, softcap)
        if out is not None:
            return out
    q_descale, k_descale, v_descale = _ops.qkv_descales(q, k, q_descale, k_descale, v_descale)
    left, right = _window(window_size)
    if _ops.eager(q, k, v, alibi_slopes, k_descale, v_descale, q_descale):
        out, lse = _ops.fwd_eager(
            q, k, v, _scale(softmax_scale, q.shape[-1]), bool(causal), left, right,
            float(softcap), alibi_slopes, return_softmax_lse, k_descale, v_descale, q_descale,
        )
    else:
        _tensors(q=q, k=k, v=v, alibi_slopes=alibi_slopes, k_descale=k_descale,
                 v_descale=v_descale, q_descale=q_descale)
        out, lse = _ops.fwd(
            q, k, v, _scale(softmax_scale, q.shape[-1]), bool(causal), left, right,
            float(softcap), alibi_slopes, bool(deterministic), k_descale, v_descale, q_descale,
        )
    return _result(out, lse, return_softmax_lse)


def flash_attn_kvpacked_func(
    q,
    kv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    return_softmax_lse=False,
):
    """q ``(batch, seqlen_q, nheads, headdim)``, kv ``(batch, seqlen_k, 2, nheads_k, headdim)``;
    otherwise as :func:`flash_attn_func`."""
    _tensors(q=q, kv=kv)
    if kv.dim() != 5 or kv.shape[2] != 2:
        raise ValueError(f"flashcore: kv must be (batch, seqlen_k, 2, nheads_k, headdim), got {tuple(kv.shape)}")
    return flash_attn_func(
        q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size, softcap,
        alibi_slopes, deterministic, return_attn_probs, return_softmax_lse=return_softmax_lse,
    )


def flash_attn_qkvpacked_func(
    qkv,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    return_softmax_lse=False,
):
    """qkv ``(batch, seqlen, 3, nheads, headdim)``; otherwise as :func:`flash_attn_func`."""
    _tensors(qkv=qkv)
    if qkv.dim() != 5 or qkv.shape[2] != 3:
        raise ValueError(f"flashcore: qkv must be (batch, seqlen, 3, nheads, headdim), got {tuple(qkv.shape)}")
    return flash_attn_func(
        qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal, window_size,
        softcap, alibi_slopes, deterministic, return_attn_probs,
        return_softmax_lse=return_softmax_lse,
    )


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
    *,
    return_softmax_lse=False,
    q_descale=None,
    k_descale=None,
    v_descale=None,
):
    """Packed sequences: q ``(total_q, nheads, headdim)``, k and v ``(total_k, nheads_k,
    headdim)``, ``cu_seqlens_q``/``cu_seqlens_k`` int32 ``(batch + 1,)`` cumulative lengths.
    With ``block_table`` int32 ``(batch, max_blocks)``, k and v are paged caches ``(num_blocks,
    page_block_size, nheads_k, headdim)`` and sequence b's keys are its first
    ``cu_seqlens_k[b+1] - cu_seqlens_k[b]`` cache rows. softmax_lse is ``(nheads, total_q)``.
    k and v (packed or paged) may be fp8 (``torch.float8_e4m3fn``) with float32
    ``k_descale``/``v_descale`` ``(batch, nheads_k)``, as FlashAttention 3 takes them; q stays
    float16/bfloat16 (an fp8 q or ``q_descale`` is ``NotImplementedError``: the fp8 forward is
    :func:`flash_attn_func`'s). Differentiable when packed (FlashAttention 2's varlen backward,
    with the window, softcap and ALiBi; ``deterministic=True`` as in :func:`flash_attn_func`); a
    paged or fp8 K/V has no backward (``NotImplementedError`` from ``backward``)."""
    _refuse(dropout_p, return_attn_probs)
    _refuse_q_descale("flash_attn_varlen_func", q_descale)
    _tensors(q=q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
             alibi_slopes=alibi_slopes, block_table=block_table, k_descale=k_descale,
             v_descale=v_descale)
    k_descale, v_descale = _ops.kv_descales(k, k_descale, v_descale)
    left, right = _window(window_size)
    cu_k, used = cu_seqlens_k, None
    if block_table is not None:
        if cu_seqlens_k.dtype != torch.int32 or cu_seqlens_k.dim() != 1:
            raise ValueError(
                "flashcore: cu_seqlens_k must be a 1-d torch.int32 tensor, got "
                f"{cu_seqlens_k.dtype} of shape {tuple(cu_seqlens_k.shape)}"
            )
        # The kernels read each sequence's key count (seqused_k), not cumulative offsets.
        used, cu_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(torch.int32), None
    tensors = (q, k, v, cu_seqlens_q, cu_k, used, block_table, alibi_slopes, k_descale,
               v_descale)
    op = _ops.varlen_fwd_impl if _ops.eager(*tensors) else _ops.varlen_fwd
    out, lse = op(
        q, k, v, cu_seqlens_q, cu_k, used, block_table, int(max_seqlen_q), int(max_seqlen_k),
        _scale(softmax_scale, q.shape[-1]), bool(causal), left, right, float(softcap),
        alibi_slopes, k_descale, v_descale, bool(deterministic),
    )
    return _result(out, lse, return_softmax_lse)


def flash_attn_varlen_kvpacked_func(
    q,
    kv,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    return_softmax_lse=False,
):
    """q ``(total_q, nheads, headdim)``, kv ``(total_k, 2, nheads_k, headdim)``; otherwise as
    :func:`flash_attn_varlen_func`."""
    _tensors(q=q, kv=kv)
    if kv.dim() != 4 or kv.shape[1] != 2:
        raise ValueError(f"flashcore: kv must be (total_k, 2, nheads_k, headdim), got {tuple(kv.shape)}")
    return flash_attn_varlen_func(
        q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
        return_attn_probs, return_softmax_lse=return_softmax_lse,
    )


def flash_attn_varlen_qkvpacked_func(
    qkv,
    cu_seqlens,
    max_seqlen,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    *,
    return_softmax_lse=False,
):
    """qkv ``(total, 3, nheads, headdim)``, one ``cu_seqlens`` for queries and keys; otherwise
    as :func:`flash_attn_varlen_func`."""
    _tensors(qkv=qkv)
    if qkv.dim() != 4 or qkv.shape[1] != 3:
        raise ValueError(f"flashcore: qkv must be (total, 3, nheads, headdim), got {tuple(qkv.shape)}")
    return flash_attn_varlen_func(
        qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
        dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
        return_attn_probs, return_softmax_lse=return_softmax_lse,
    )


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
    *,
    q_descale=None,
    k_descale=None,
    v_descale=None,
):
    """q ``(batch, seqlen_q, nheads, headdim)``; a cache ``(batch, seqlen_cache, nheads_k,
    headdim)``, or with ``block_table`` int32 ``(batch, max_blocks)`` a paged one ``(num_blocks,
    page_block_size, nheads_k, headdim)``; ``cache_seqlens`` an int or int32 ``(batch,)`` (None:
    the whole cache). ``k``/``v`` ``(batch, seqlen_new, nheads_k, headdim)`` are written into the
    caches in place at ``cache_seqlens`` before attending, as FlashAttention does
    (``cache_seqlens`` itself is not advanced). ``num_splits`` is a hint FlashAttention takes
    for its split-KV heuristic; flashcore's planner picks the split itself, and the result does
    not depend on it. Inference only: no backward.

    An fp8 cache, as FlashAttention 3 takes it: ``k_cache`` and ``v_cache`` both
    ``torch.float8_e4m3fn``, with float32 ``k_descale``/``v_descale`` of shape
    ``(batch, nheads_k)`` (also ``(nheads_k,)`` or one element; ``t.expand(batch, nheads_k)``
    views are read without a copy), on q's device. A stored byte's value is
    ``float(byte) * descale[b, h_k]``; a missing descale is 1.0. q, ``k``/``v`` (the rows to
    append, quantized into the cache as ``(k / k_descale).to(float8_e4m3fn)``, saturating) and
    the output stay float16/bfloat16. Head dims 64, 128 and 256 (the kernel that reads fp8), on
    compute capability 8.9 or newer. An fp8 q or ``q_descale`` is refused
    (``NotImplementedError``: the fp8 forward is :func:`flash_attn_func`'s)."""
    for name, arg in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin),
                      ("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad)):
        if arg is not None:
            raise NotImplementedError(f"flashcore: {name} is not implemented in flash_attn_with_kvcache")
    _refuse_q_descale("flash_attn_with_kvcache", q_descale)
    device = _tensors(q=q, k_cache=k_cache, v_cache=v_cache, k=k, v=v,
                      cache_seqlens=cache_seqlens if isinstance(cache_seqlens, Tensor) else None,
                      block_table=block_table, alibi_slopes=alibi_slopes, k_descale=k_descale,
                      v_descale=v_descale)
    if (k is None) != (v is None):
        raise ValueError("flashcore: k and v (the rows to append) must be given together")
    if torch.is_grad_enabled() and any(
        isinstance(t, Tensor) and t.requires_grad for t in (q, k_cache, v_cache, k, v)
    ):
        raise NotImplementedError(
            "flashcore: flash_attn_with_kvcache is inference only (it appends to the cache in "
            "place and has no backward); call it under torch.no_grad() or on tensors that do not "
            "require grad"
        )
    if not isinstance(num_splits, int) or num_splits < 0:
        raise ValueError(f"flashcore: num_splits must be an int >= 0, got {num_splits!r}")
    batch = q.shape[0]
    if cache_seqlens is None or isinstance(cache_seqlens, int):
        if cache_seqlens is None:
            # The whole cache: its capacity (the block table's for a paged one).
            cache_seqlens = (k_cache.shape[1] if block_table is None
                             else block_table.shape[1] * k_cache.shape[1])
        cache_seqlens = torch.full((batch,), cache_seqlens, dtype=torch.int32, device=device)
    k_descale, v_descale = _ops.kv_descales(k_cache, k_descale, v_descale)
    left, right = _window(window_size)
    tensors = (q, k_cache, v_cache, cache_seqlens, block_table, k, v, alibi_slopes, k_descale,
               v_descale)
    op = _ops.kvcache_fwd_impl if _ops.eager(*tensors) else _ops.kvcache_fwd
    out, lse = op(
        q, k_cache, v_cache, cache_seqlens, block_table, k, v,
        _scale(softmax_scale, q.shape[-1]), bool(causal), left, right, float(softcap),
        alibi_slopes, k_descale, v_descale,
    )
    return _result(out, lse, return_softmax_lse)
