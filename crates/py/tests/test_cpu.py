"""What the package does without a GPU: import, argument checks and their messages, refusals,
and the fake (meta) implementations that torch.compile traces through. Tensors on the ``meta``
device carry shapes and dtypes but no memory; flashcore's ops run their argument checks on
them (the same Rust checks as on the GPU) and return outputs of the right shapes."""

import pytest
import torch

import flashcore
from flashcore import _ops
from flashcore.flash_attn_interface import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

F16 = torch.float16


def meta(*shape, dtype=F16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def i32(*shape):
    return torch.empty(*shape, dtype=torch.int32, device="meta")


def test_import_and_kernels():
    assert flashcore.__version__
    assert "scalar" in flashcore.kernels()
    names = [n for n, _ in flashcore.backward_kernels()]
    assert "scalar" in names
    assert any(det for _, det in flashcore.backward_kernels())


def test_batch_invariant_switch():
    assert flashcore.batch_invariant() is False
    flashcore.set_batch_invariant(True)
    try:
        assert flashcore.batch_invariant() is True
    finally:
        flashcore.set_batch_invariant(False)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(8, 8), (8, 2), (8, 1)])
@pytest.mark.parametrize("d", [32, 64, 80, 96, 128, 192, 256])
def test_dense_shapes(causal, heads, d):
    h, h_kv = heads
    q, k = meta(2, 100, h, d), meta(2, 37, h_kv, d)
    out, lse = flash_attn_func(q, k, k, causal=causal, return_softmax_lse=True)
    assert out.shape == q.shape and out.dtype == F16 and out.is_contiguous()
    assert lse.shape == (2, h, 100) and lse.dtype == torch.float32


def test_packed_shapes():
    qkv = meta(2, 64, 3, 4, 64, dtype=torch.bfloat16)
    out = flash_attn_qkvpacked_func(qkv, causal=True)
    assert out.shape == (2, 64, 4, 64) and out.dtype == torch.bfloat16
    out = flash_attn_kvpacked_func(meta(2, 10, 4, 64), meta(2, 30, 2, 2, 64))
    assert out.shape == (2, 10, 4, 64)


def test_varlen_shapes():
    cu = i32(4)
    out, lse = flash_attn_varlen_func(
        meta(300, 8, 128), meta(500, 2, 128), meta(500, 2, 128), cu, cu, 200, 300,
        causal=True, return_softmax_lse=True,
    )
    assert out.shape == (300, 8, 128)
    assert lse.shape == (8, 300)
    out = flash_attn_varlen_qkvpacked_func(meta(300, 3, 8, 64), cu, 200)
    assert out.shape == (300, 8, 64)
    out = flash_attn_varlen_kvpacked_func(meta(300, 8, 64), meta(400, 2, 2, 64), cu, cu, 200, 300)
    assert out.shape == (300, 8, 64)


def test_paged_varlen_shapes():
    cu = i32(3)
    cache = meta(40, 64, 2, 128)
    out = flash_attn_varlen_func(
        meta(50, 8, 128), cache, cache, cu, cu, 30, 500, causal=True, block_table=i32(2, 10)
    )
    assert out.shape == (50, 8, 128)


def test_kvcache_shapes():
    q = meta(4, 1, 8, 128)
    cache = meta(4, 1024, 2, 128)
    out, lse = flash_attn_with_kvcache(
        q, cache, cache, k=meta(4, 1, 2, 128), v=meta(4, 1, 2, 128), cache_seqlens=i32(4),
        causal=True, return_softmax_lse=True,
    )
    assert out.shape == q.shape and lse.shape == (4, 8, 1)
    paged = meta(64, 256, 2, 128)
    out = flash_attn_with_kvcache(q, paged, paged, cache_seqlens=i32(4), block_table=i32(4, 16))
    assert out.shape == q.shape


# ---- refusals: what flashcore does not do is an error, never ignored ----


def test_dropout_refused():
    q = meta(1, 16, 2, 64)
    with pytest.raises(NotImplementedError, match="dropout"):
        flash_attn_func(q, q, q, dropout_p=0.1)


def test_attn_probs_refused():
    q = meta(1, 16, 2, 64)
    with pytest.raises(NotImplementedError, match="return_softmax_lse"):
        flash_attn_func(q, q, q, return_attn_probs=True)
    cu = i32(2)
    with pytest.raises(NotImplementedError, match="return_attn_probs"):
        flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 16, 16, return_attn_probs=True)


@pytest.mark.parametrize("arg", ["rotary_cos", "rotary_sin", "cache_batch_idx", "cache_leftpad"])
def test_kvcache_refusals(arg):
    q = meta(2, 1, 2, 64)
    cache = meta(2, 64, 2, 64)
    with pytest.raises(NotImplementedError, match=arg):
        flash_attn_with_kvcache(q, cache, cache, cache_seqlens=3, **{arg: i32(2)})


# ---- argument checks, with FlashAttention's wording where it has one ----


def test_cpu_tensor_refused():
    q = torch.randn(1, 16, 2, 64).half()
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        flash_attn_func(q, q, q)


def test_not_a_tensor():
    q = meta(1, 16, 2, 64)
    with pytest.raises(TypeError, match="torch.Tensor"):
        flash_attn_func(q, [1, 2], q)


def test_dtype_refused():
    q = meta(1, 16, 2, 64, dtype=torch.float32)
    with pytest.raises(ValueError, match="only supported for f16/bf16"):
        flash_attn_func(q, q, q)


def test_dtype_mismatch():
    q, k = meta(1, 16, 2, 64), meta(1, 16, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="dtype mismatch"):
        flash_attn_func(q, k, k)


def test_heads_must_divide():
    with pytest.raises(ValueError, match="must divide number of heads"):
        flash_attn_func(meta(1, 16, 6, 64), meta(1, 16, 4, 64), meta(1, 16, 4, 64))


def test_head_dim_mismatch():
    with pytest.raises(ValueError, match="shape mismatch"):
        flash_attn_func(meta(1, 16, 2, 64), meta(1, 16, 2, 128), meta(1, 16, 2, 128))


def test_rank():
    with pytest.raises(ValueError, match="rank 4"):
        flash_attn_func(meta(16, 2, 64), meta(16, 2, 64), meta(16, 2, 64))


def test_head_dim_not_contiguous():
    q = meta(1, 16, 64, 2).transpose(2, 3)
    with pytest.raises(ValueError, match="must be contiguous"):
        flash_attn_func(q, q, q)


def test_strided_head_dim_contiguous_taken():
    q = meta(1, 2, 16, 64).transpose(1, 2)  # (b, s, h, d) view of a (b, h, s, d) tensor
    out = flash_attn_func(q, q, q)
    assert out.shape == q.shape and out.is_contiguous()


def test_window_must_be_pair():
    q = meta(1, 16, 2, 64)
    with pytest.raises(ValueError, match="window_size"):
        flash_attn_func(q, q, q, window_size=3)


def test_negative_softcap():
    q = meta(1, 16, 2, 64)
    with pytest.raises(ValueError, match="softcap"):
        flash_attn_func(q, q, q, softcap=-1.0)


def test_non_finite_scale():
    q = meta(1, 16, 2, 64)
    with pytest.raises(ValueError, match="softmax_scale"):
        flash_attn_func(q, q, q, softmax_scale=float("nan"))


def test_alibi_shape_and_dtype():
    q = meta(2, 16, 4, 64)
    with pytest.raises(ValueError, match="alibi_slopes"):
        flash_attn_func(q, q, q, alibi_slopes=meta(3, dtype=torch.float32))
    with pytest.raises(ValueError, match="alibi_slopes must be torch.float32"):
        flash_attn_func(q, q, q, alibi_slopes=meta(4))
    flash_attn_func(q, q, q, alibi_slopes=meta(2, 4, dtype=torch.float32))


def test_varlen_cu_seqlens():
    q = meta(30, 2, 64)
    with pytest.raises(ValueError, match="same number of elements"):
        flash_attn_varlen_func(q, q, q, i32(3), i32(4), 10, 10)
    with pytest.raises(ValueError, match="seqlens_q should have a len >= 2"):
        flash_attn_varlen_func(q, q, q, i32(1), i32(1), 10, 10)
    with pytest.raises(ValueError, match="cu_seqlens_q must be torch.int32"):
        flash_attn_varlen_func(q, q, q, meta(3, dtype=torch.float32), i32(3), 10, 10)


def test_block_table_shape():
    q, cache = meta(2, 1, 2, 64), meta(8, 16, 2, 64)
    with pytest.raises(ValueError, match="block_table must have shape"):
        flash_attn_with_kvcache(q, cache, cache, cache_seqlens=i32(2), block_table=i32(3, 4))


def test_kvcache_append_pairs():
    q, cache = meta(2, 1, 2, 64), meta(2, 32, 2, 64)
    with pytest.raises(ValueError, match="together"):
        flash_attn_with_kvcache(q, cache, cache, k=meta(2, 1, 2, 64), cache_seqlens=3)


def test_kvcache_seqlens_shape():
    q, cache = meta(2, 1, 2, 64), meta(2, 32, 2, 64)
    with pytest.raises(ValueError, match="seqused_k must have shape"):
        flash_attn_with_kvcache(q, cache, cache, cache_seqlens=i32(3))


def test_mixed_devices():
    q = meta(1, 16, 2, 64)
    with pytest.raises(ValueError, match="CUDA tensor"):
        flash_attn_func(q, q, torch.randn(1, 16, 2, 64).half())


def test_head_dim_v_output_shape():
    """V's own head dim (192 / 128): O takes V's, the LSE q's rows."""
    q, k, v = meta(2, 16, 4, 192), meta(2, 32, 2, 192), meta(2, 32, 2, 128)
    out, lse = flash_attn_func(q, k, v, causal=True, return_softmax_lse=True)
    assert out.shape == (2, 16, 4, 128) and lse.shape == (2, 4, 16)
    with pytest.raises(ValueError, match="shape mismatch"):
        flash_attn_func(q, k, meta(2, 31, 2, 128))


def test_prepared_path_declines_what_is_not_one_cuda_device():
    """The prepared eager path takes plain CUDA tensors only: CPU and meta tensors, and a list
    window (unhashable), go to the general path, which gives the errors above."""
    _ops.forget_prepared()
    cpu = torch.randn(1, 16, 2, 64).half()
    assert _ops.fwd_fast(cpu, cpu, cpu, None, False, (-1, -1), 0.0) is None
    m = meta(1, 16, 2, 64)
    assert _ops.fwd_fast(m, m, m, None, True, (-1, -1), 0.0) is None
    assert _ops.fwd_fast(m, m, m, None, True, [-1, -1], 0.0) is None
    assert not any(_ops._prepared.values())
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        flash_attn_func(cpu, cpu, cpu)


# ---- torch integration without a GPU: the ops' schemas, fakes and autograd registration ----


def test_opcheck_forward():
    q, k = meta(2, 64, 8, 64), meta(2, 96, 2, 64)
    torch.library.opcheck(_ops.fwd, (q, k, k, 0.125, True, -1, -1, 0.0, None, False))


def test_opcheck_backward():
    q, k = meta(2, 64, 8, 64), meta(2, 96, 2, 64)
    lse = meta(2, 8, 64, dtype=torch.float32)
    torch.library.opcheck(
        _ops.bwd, (q, q, k, k, q, lse, 0.125, True, 16, 0, 30.0, meta(2, 8, dtype=torch.float32),
                   False),
    )


def test_opcheck_varlen_backward():
    cu = i32(3)
    q, k = meta(40, 4, 64), meta(50, 2, 64)
    lse = meta(4, 40, dtype=torch.float32)
    for alibi, deterministic in [(None, False), (meta(4, dtype=torch.float32), True),
                                 (meta(2, 4, dtype=torch.float32), False)]:
        torch.library.opcheck(
            _ops.varlen_bwd,
            (q, q, k, k, q, lse, cu, cu, 20, 30, 0.125, True, 8, 0, 5.0, alibi, deterministic),
        )


def test_opcheck_varlen_and_kvcache():
    cu = i32(3)
    torch.library.opcheck(
        _ops.varlen_fwd,
        (meta(40, 4, 64), meta(50, 2, 64), meta(50, 2, 64), cu, cu, None, None, 20, 30, 0.125,
         True, -1, -1, 0.0, None),
    )
    torch.library.opcheck(
        _ops.varlen_fwd,
        (meta(40, 4, 64), meta(50, 2, 64), meta(50, 2, 64), cu, cu, None, None, 20, 30, 0.125,
         False, 4, 4, 30.0, meta(4, dtype=torch.float32), None, None, True),
    )
    cache = meta(2, 128, 2, 64)
    torch.library.opcheck(
        _ops.kvcache_fwd,
        (meta(2, 1, 4, 64), cache, cache, i32(2), None, meta(2, 1, 2, 64), meta(2, 1, 2, 64),
         0.125, True, -1, -1, 0.0, None),
    )


def test_compile_fullgraph_traces():
    def attend(q, k, v):
        return flash_attn_func(q, k, v, causal=True) * 2

    q = meta(2, 128, 8, 64).requires_grad_(True)
    k = meta(2, 256, 2, 64)
    compiled = torch.compile(attend, fullgraph=True, backend="aot_eager")
    out = compiled(q, k, k)
    assert out.shape == q.shape and out.requires_grad
    out.sum().backward()
    assert q.grad.shape == q.shape


def test_compile_traces_bad_shapes_as_errors():
    def attend(q, k):
        return flash_attn_func(q, k, k)

    compiled = torch.compile(attend, fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="must divide number of heads"):
        compiled(meta(1, 16, 6, 64), meta(1, 16, 4, 64))


MODES = [
    dict(window_size=(4, 0)),
    dict(window_size=(3, 5)),
    dict(causal=True, window_size=(8, -1)),
    dict(softcap=30.0),
    dict(alibi_slopes=meta(2, dtype=torch.float32)),
    dict(causal=True, window_size=(4, 2), softcap=5.0,
         alibi_slopes=meta(1, 2, dtype=torch.float32)),
]
_MODE_IDS = ["window", "window_two_sided", "causal_window", "softcap", "alibi", "all"]


def _backward_rule(q, k, lse, cu=None, max_seqlen=(0, 0), **mode):
    """``_flashcore.backward``'s checks (device None: nothing launches) on these shapes: dq, dk,
    dv and dout shaped as q, k, k and q."""
    arg = _ops._shape_arg
    window = mode.get("window_size", (-1, -1))
    options = (0.125, mode.get("causal", False), window, mode.get("softcap", 0.0))
    return flashcore._flashcore.backward(
        *(arg(t) for t in (q, q, k, k, q, lse, q, k, k)), options,
        arg(mode.get("alibi_slopes")), False, arg(cu), arg(cu), *max_seqlen, False, (0, 0),
        None, 0,
    )


@pytest.mark.parametrize("mode", MODES, ids=_MODE_IDS)
def test_backward_takes_the_modes(mode):
    """The backward's Rust checks take every mode the forward takes (windows, causal, softcap,
    ALiBi per head and per (batch, head)), dense and varlen."""
    q, k = meta(1, 16, 2, 64), meta(1, 24, 2, 64)
    assert _backward_rule(q, k, meta(1, 2, 16, dtype=torch.float32), **mode) == ("", 0)
    q, k = meta(40, 2, 64), meta(50, 2, 64)
    lse = meta(2, 40, dtype=torch.float32)
    assert _backward_rule(q, k, lse, cu=i32(2), max_seqlen=(40, 50), **mode) == ("", 0)


def test_varlen_backward_rule_refusals():
    q, k, lse = meta(40, 4, 64), meta(50, 2, 64), meta(4, 40, dtype=torch.float32)
    arg = _ops._shape_arg
    with pytest.raises(ValueError, match="cu_seqlens_q and cu_seqlens_k together"):
        flashcore._flashcore.backward(
            *(arg(t) for t in (q, q, k, k, q, lse, q, k, k)), (0.125, True, (-1, -1), 0.0),
            None, False, arg(i32(3)), None, 20, 30, False, (0, 0), None, 0,
        )
    with pytest.raises(ValueError, match="same number of elements"):
        flashcore._flashcore.backward(
            *(arg(t) for t in (q, q, k, k, q, lse, q, k, k)), (0.125, True, (-1, -1), 0.0),
            None, False, arg(i32(3)), arg(i32(4)), 20, 30, False, (0, 0), None, 0,
        )
    with pytest.raises(ValueError, match="cu_seqlens_q must be torch.int32"):
        _backward_rule(q, k, lse, cu=meta(3, dtype=torch.int64), max_seqlen=(20, 30))
    with pytest.raises(ValueError, match="must divide number of heads"):
        _backward_rule(meta(40, 3, 64), k, lse, cu=i32(3), max_seqlen=(20, 30))
    with pytest.raises(ValueError, match="alibi_slopes"):
        _backward_rule(q, k, lse, cu=i32(3), max_seqlen=(20, 30),
                       alibi_slopes=meta(3, 4, dtype=torch.float32))
    # dq must be laid out as q (the op allocates it so).
    with pytest.raises(ValueError, match="dq must have q's dtype, shape and strides"):
        flashcore._flashcore.backward(
            *(arg(t) for t in (q, q, k, k, q, lse, k, k, k)), (0.125, True, (-1, -1), 0.0),
            None, False, arg(i32(3)), arg(i32(3)), 20, 30, False, (0, 0), None, 0,
        )


@pytest.mark.parametrize("mode", MODES, ids=_MODE_IDS)
def test_compile_traces_the_backward_of_modes(mode):
    """A forward with a mode compiles with its backward (fullgraph), which gives q's gradient."""
    q = meta(1, 16, 2, 64).requires_grad_(True)
    compiled = torch.compile(lambda q: flash_attn_func(q, q, q, **mode), fullgraph=True,
                             backend="aot_eager")
    out = compiled(q)
    assert out.shape == q.shape
    out.sum().backward()
    assert q.grad.shape == q.shape


@pytest.mark.parametrize("mode", MODES, ids=_MODE_IDS)
def test_backward_of_mode_shapes(mode):
    q = meta(1, 16, 2, 64).requires_grad_(True)
    k = meta(1, 24, 1, 64).requires_grad_(True)
    v = meta(1, 24, 1, 64).requires_grad_(True)
    flash_attn_func(q, k, v, **mode).sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape


@pytest.mark.parametrize("mode", MODES, ids=_MODE_IDS)
def test_varlen_backward_shapes(mode):
    """The varlen forward's autograd goes through flashcore::varlen_bwd (its fake on meta
    tensors), packed forms included."""
    cu = i32(2)
    q = meta(40, 2, 64).requires_grad_(True)
    k = meta(50, 1, 64).requires_grad_(True)
    v = meta(50, 1, 64).requires_grad_(True)
    out, lse = flash_attn_varlen_func(q, k, v, cu, cu, 40, 50, **mode, return_softmax_lse=True)
    assert not lse.requires_grad
    out.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape
    qkv = meta(40, 3, 2, 64).requires_grad_(True)
    flash_attn_varlen_qkvpacked_func(qkv, cu, 40, **mode).sum().backward()
    assert qkv.grad.shape == qkv.shape
    kv = meta(50, 2, 1, 64).requires_grad_(True)
    flash_attn_varlen_kvpacked_func(q, kv, cu, cu, 40, 50, **mode).sum().backward()
    assert kv.grad.shape == kv.shape


def test_compile_fullgraph_traces_the_varlen_backward():
    def attend(q, k, v, cu_q, cu_k):
        return flash_attn_varlen_func(q, k, v, cu_q, cu_k, 20, 30, causal=True,
                                      window_size=(8, 0), deterministic=True) * 2

    q = meta(40, 4, 64).requires_grad_(True)
    k = meta(50, 2, 64).requires_grad_(True)
    compiled = torch.compile(attend, fullgraph=True, backend="aot_eager")
    out = compiled(q, k, k, i32(3), i32(3))
    assert out.shape == q.shape and out.requires_grad
    out.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape


def test_compile_traces_a_paged_varlen_forward_with_grad():
    """A paged forward whose q requires grad still compiles: its backward refuses when it runs
    (test_gpu.py)."""
    q = meta(16, 2, 64).requires_grad_(True)
    cache = meta(8, 16, 2, 64)
    compiled = torch.compile(
        lambda q, c, cu, t: flash_attn_varlen_func(q, c, c, cu, cu, 8, 32, block_table=t),
        fullgraph=True, backend="aot_eager",
    )
    assert compiled(q, cache, i32(3), i32(2, 4)).shape == q.shape


def test_lse_not_differentiable():
    q = meta(1, 16, 2, 64).requires_grad_(True)
    out, lse = flash_attn_func(q, q, q, return_softmax_lse=True)
    assert out.requires_grad and not lse.requires_grad


def test_backward_of_dense_shapes():
    q = meta(2, 16, 4, 64).requires_grad_(True)
    k = meta(2, 24, 2, 64).requires_grad_(True)
    v = meta(2, 24, 2, 64).requires_grad_(True)
    flash_attn_func(q, k, v, causal=True).sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape


def test_kvcache_is_inference_only():
    q = meta(2, 1, 2, 64).requires_grad_(True)
    cache = meta(2, 32, 2, 64)
    with pytest.raises(NotImplementedError, match="inference only"):
        flash_attn_with_kvcache(q, cache, cache, cache_seqlens=3)
    with torch.no_grad():
        assert flash_attn_with_kvcache(q, cache, cache, cache_seqlens=3).shape == q.shape


def test_paged_varlen_cu_seqlens_k_dtype():
    q, cache = meta(16, 2, 64), meta(8, 16, 2, 64)
    cu = i32(3)
    with pytest.raises(ValueError, match="cu_seqlens_k must be a 1-d torch.int32"):
        flash_attn_varlen_func(q, cache, cache, cu, meta(3, dtype=torch.float32), 8, 32,
                               block_table=i32(2, 4))


# ---- fp8 KV caches (FlashAttention 3's float8_e4m3fn K/V with k_descale / v_descale) ----

E4M3 = torch.float8_e4m3fn
F32 = torch.float32
BF16 = torch.bfloat16


def e4m3(*shape):
    return meta(*shape, dtype=E4M3)


def f32(*shape):
    return meta(*shape, dtype=F32)


# (batch, nheads_k) = (2, 2) descales as FlashAttention 3 takes them, and the other forms
# flashcore reads without a copy.
DESCALES = {
    "batch_head": lambda: f32(2, 2),
    "head": lambda: f32(2),
    "one": lambda: f32(1),
    "scalar": lambda: torch.empty((), dtype=F32, device="meta"),
    "expanded_one": lambda: f32(1).expand(2, 2),
    "expanded_head": lambda: f32(2).expand(2, 2),
}


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("kind", list(DESCALES))
def test_fp8_kvcache_shapes(kind, paged):
    q = meta(2, 1, 8, 128, dtype=BF16)
    used = i32(2)
    if paged:
        cache, table = e4m3(16, 64, 2, 128), i32(2, 4)
    else:
        cache, table = e4m3(2, 256, 2, 128), None
    out, lse = flash_attn_with_kvcache(
        q, cache, cache, k=meta(2, 1, 2, 128, dtype=BF16), v=meta(2, 1, 2, 128, dtype=BF16),
        cache_seqlens=used, block_table=table, causal=True, k_descale=DESCALES[kind](),
        v_descale=DESCALES[kind](), return_softmax_lse=True,
    )
    assert out.shape == q.shape and out.dtype == BF16 and lse.shape == (2, 8, 1)


@pytest.mark.parametrize("given", [None, "k", "v", "k_expanded"])
def test_fp8_missing_descale_is_one(given):
    """FlashAttention 3 reads a missing descale as 1.0: flashcore passes a table of ones in its
    place, shaped as the other one."""
    q, cache = meta(2, 1, 8, 64, dtype=F16), e4m3(2, 64, 2, 64)
    d = f32(1).expand(2, 2) if given == "k_expanded" else f32(2, 2)
    kw = {} if given is None else {("v_descale" if given == "v" else "k_descale"): d}
    assert flash_attn_with_kvcache(q, cache, cache, cache_seqlens=3, **kw).shape == q.shape
    k_d, v_d = _ops.kv_descales(cache, kw.get("k_descale"), kw.get("v_descale"))
    assert k_d.dtype == v_d.dtype == F32
    if given is None:
        assert k_d.shape == (1,)
    else:
        assert k_d.shape == v_d.shape == (2, 2) and k_d.is_contiguous() and v_d.is_contiguous()
    # A 16-bit cache gets no default (and descales given with one are refused below).
    assert _ops.kv_descales(meta(2, 64, 2, 64), None, None) == (None, None)


def _kvcache_call(q=None, k_cache=None, v_cache=None, **kw):
    q = meta(2, 1, 8, 128, dtype=BF16) if q is None else q
    k_cache = e4m3(2, 256, 2, 128) if k_cache is None else k_cache
    v_cache = e4m3(2, 256, 2, 128) if v_cache is None else v_cache
    return flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=3, **kw)


@pytest.mark.parametrize(
    "case,error,match",
    [
        ("q_e4m3", NotImplementedError, r"fp8 \(float8_e4m3fn\) q is not implemented"),
        ("e5m2_cache", ValueError, "float8_e5m2"),
        ("k_only_fp8", ValueError, "must both be e4m3"),
        ("v_only_fp8", ValueError, "must both be e4m3"),
        ("descale_f16", ValueError, "k_descale must be torch.float32"),
        ("descale_f64_v", ValueError, "v_descale must be torch.float32"),
        ("descale_shape", ValueError, r"k_descale must have shape \(2, 2\)"),
        ("descale_rank3", ValueError, "k_descale must have shape"),
        ("descale_cpu", ValueError, "k_descale must be a CUDA tensor"),
        ("descale_not_tensor", TypeError, "k_descale must be a torch.Tensor"),
        ("descale_transposed", ValueError, "not a table the kernels can read"),
        ("descales_unalike", ValueError, "laid out alike"),
        ("descale_without_fp8", ValueError, "K/V are not e4m3"),
        ("q_descale", NotImplementedError, "q_descale"),
        ("k_new_fp8", ValueError, "stay in q's dtype"),
        ("stride_not_16_bytes", ValueError, "multiple of 16"),
        ("head_dim_v", ValueError, "one head dim"),
    ],
)
def test_fp8_kvcache_refusals(case, error, match):
    """Every bad mix is refused before anything launches, as the package's other errors."""
    e5m2 = torch.float8_e5m2
    calls = {
        "q_e4m3": lambda: _kvcache_call(q=e4m3(2, 1, 8, 128)),
        "e5m2_cache": lambda: _kvcache_call(k_cache=meta(2, 256, 2, 128, dtype=e5m2),
                                            v_cache=meta(2, 256, 2, 128, dtype=e5m2)),
        "k_only_fp8": lambda: _kvcache_call(v_cache=meta(2, 256, 2, 128, dtype=BF16)),
        "v_only_fp8": lambda: _kvcache_call(k_cache=meta(2, 256, 2, 128, dtype=BF16)),
        "descale_f16": lambda: _kvcache_call(k_descale=meta(2, 2), v_descale=f32(2, 2)),
        "descale_f64_v": lambda: _kvcache_call(k_descale=f32(2, 2),
                                               v_descale=meta(2, 2, dtype=torch.float64)),
        "descale_shape": lambda: _kvcache_call(k_descale=f32(3, 2), v_descale=f32(3, 2)),
        "descale_rank3": lambda: _kvcache_call(k_descale=f32(2, 2, 1), v_descale=f32(2, 2, 1)),
        "descale_cpu": lambda: _kvcache_call(k_descale=torch.ones(2, 2), v_descale=f32(2, 2)),
        "descale_not_tensor": lambda: _kvcache_call(k_descale=1.0, v_descale=f32(2, 2)),
        "descale_transposed": lambda: _kvcache_call(k_descale=f32(2, 2).t(),
                                                    v_descale=f32(2, 2).t()),
        "descales_unalike": lambda: _kvcache_call(k_descale=f32(2, 2), v_descale=f32(2)),
        "descale_without_fp8": lambda: _kvcache_call(
            k_cache=meta(2, 256, 2, 128, dtype=BF16), v_cache=meta(2, 256, 2, 128, dtype=BF16),
            k_descale=f32(2, 2), v_descale=f32(2, 2)),
        "q_descale": lambda: _kvcache_call(q_descale=f32(2, 8)),
        "k_new_fp8": lambda: _kvcache_call(k=e4m3(2, 1, 2, 128), v=e4m3(2, 1, 2, 128)),
        # A head dim of 8 bytes with one KV head: rows 8 bytes apart (e4m3 rows are copied 16
        # bytes at a time).
        "stride_not_16_bytes": lambda: _kvcache_call(q=meta(2, 1, 2, 8, dtype=BF16),
                                                     k_cache=e4m3(2, 64, 1, 8),
                                                     v_cache=e4m3(2, 64, 1, 8)),
        "head_dim_v": lambda: _kvcache_call(v_cache=e4m3(2, 256, 2, 64)),
    }
    with pytest.raises(error, match=match):
        calls[case]()


def test_fp8_descale_on_another_device_refused():
    """The descales must be on q's device (the CPU here: the device check comes first)."""
    q = torch.randn(2, 1, 8, 64).bfloat16()
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        flash_attn_with_kvcache(q, q.to(E4M3), q.to(E4M3), cache_seqlens=1)


def test_fp8_dense_and_varlen_shapes():
    """flash_attn_func and flash_attn_varlen_func (packed and paged) take fp8 K/V too."""
    q = meta(2, 16, 8, 64, dtype=BF16)
    kv = e4m3(2, 32, 2, 64)
    out = flash_attn_func(q, kv, kv, causal=True, k_descale=f32(2, 2), v_descale=f32(2, 2))
    assert out.shape == q.shape and out.dtype == BF16
    assert flash_attn_func(q, kv, kv).shape == q.shape  # descales default to 1.0
    cu = i32(3)
    out, lse = flash_attn_varlen_func(
        meta(30, 8, 64, dtype=BF16), e4m3(50, 2, 64), e4m3(50, 2, 64), cu, cu, 20, 30,
        causal=True, k_descale=f32(2), v_descale=f32(2), return_softmax_lse=True,
    )
    assert out.shape == (30, 8, 64) and lse.shape == (8, 30)
    pages = e4m3(8, 16, 2, 64)
    out = flash_attn_varlen_func(meta(30, 8, 64, dtype=BF16), pages, pages, cu, cu, 20, 64,
                                 block_table=i32(2, 4), k_descale=f32(2, 2),
                                 v_descale=f32(2, 2))
    assert out.shape == (30, 8, 64)
    with pytest.raises(ValueError, match="must both be e4m3"):
        flash_attn_func(q, kv, meta(2, 32, 2, 64, dtype=BF16))
    # q_descale scales an fp8 q only (the fp8 forward below).
    with pytest.raises(ValueError, match="q_descale is given, but q is not e4m3"):
        flash_attn_func(q, kv, kv, q_descale=f32(2, 2))


def test_fp8_skips_the_prepared_path(monkeypatch):
    """A call with descales never reaches the prepared 16-bit path; one without (FlashAttention
    3's 1.0) reaches it only for it to decline (it keys 16-bit K/V only: test_gpu.py)."""
    seen = []
    real = _ops.fwd_fast

    def spy(q, k, v, *args):
        seen.append(k.dtype)
        return real(q, k, v, *args)

    monkeypatch.setattr(_ops, "fwd_fast", spy)
    q, kv = meta(1, 16, 2, 64, dtype=BF16), e4m3(1, 16, 2, 64)
    flash_attn_func(q, kv, kv, k_descale=f32(1), v_descale=f32(1))
    assert seen == []
    assert flash_attn_func(q, kv, kv).shape == q.shape
    assert seen == [E4M3]


def test_fp8_backward_refusal_rule():
    """The backward of an fp8 K/V is refused (NotImplementedError), here by the Rust checks; the
    interface refuses it earlier, when ``backward`` runs (test_gpu.py)."""
    q, kv = meta(1, 16, 2, 64, dtype=BF16), e4m3(1, 16, 2, 64)
    lse = f32(1, 2, 16)
    arg = _ops._shape_arg
    with pytest.raises(NotImplementedError, match="fp8"):
        flashcore._flashcore.backward(
            *(arg(t) for t in (q, q, kv, kv, q, lse, q, kv, kv)),
            (0.125, False, (-1, -1), 0.0), None, False, None, None, 0, 0, False, (0, 0), None, 0,
        )


def test_fp8_compile_traces_with_grad():
    """An fp8 forward whose q requires grad still compiles: its backward refuses when it runs."""
    q = meta(1, 16, 2, 64, dtype=BF16).requires_grad_(True)
    kv = e4m3(1, 16, 2, 64)
    compiled = torch.compile(
        lambda q, k, kd: flash_attn_func(q, k, k, causal=True, k_descale=kd, v_descale=kd),
        fullgraph=True, backend="aot_eager",
    )
    assert compiled(q, kv, f32(1, 2)).shape == q.shape


@pytest.mark.parametrize("descales", [True, False])
def test_fp8_kvcache_compile_fullgraph_traces(descales):
    """Traced without a graph break, the ones of missing descales included."""
    def decode(q, k_cache, v_cache, k, v, used, k_descale, v_descale):
        return flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=used,
                                       causal=True, k_descale=k_descale, v_descale=v_descale)

    compiled = torch.compile(decode, fullgraph=True, backend="eager")
    q = meta(2, 1, 8, 128, dtype=BF16)
    new = meta(2, 1, 2, 128, dtype=BF16)
    cache = e4m3(2, 256, 2, 128)
    d = f32(2, 2) if descales else None
    out = compiled(q, cache, cache, new, new, i32(2), d, d)
    assert out.shape == q.shape and out.dtype == BF16


def test_fp8_opcheck_kvcache():
    cache = e4m3(2, 128, 2, 64)
    torch.library.opcheck(
        _ops.kvcache_fwd,
        (meta(2, 1, 4, 64, dtype=BF16), cache, cache, i32(2), None, meta(2, 1, 2, 64, dtype=BF16),
         meta(2, 1, 2, 64, dtype=BF16), 0.125, True, -1, -1, 0.0, None, f32(2, 2), f32(2, 2)),
    )


# ---- the fp8 forward (FlashAttention 3's: float8_e4m3fn q, k and v with q/k/v descales) ----


def _fp8(q=None, k=None, v=None, **kw):
    """flash_attn_func on e4m3 q ``(2, 16, 8, 128)`` and k = v ``(2, 32, 2, 128)`` (meta)."""
    q = e4m3(2, 16, 8, 128) if q is None else q
    k = e4m3(2, 32, 2, 128) if k is None else k
    v = k if v is None else v
    return flash_attn_func(q, k, v, **kw)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(8, 8), (8, 2), (8, 1)])
@pytest.mark.parametrize("kind", list(DESCALES))
def test_fp8_forward_shapes(kind, heads, causal):
    """Every descale layout (all three alike), MHA/GQA/MQA: O is bfloat16 (FlashAttention 3's),
    the LSE float32. The descales' shapes follow nheads_k."""
    h, h_kv = heads
    layouts = {
        "batch_head": lambda: f32(2, h_kv),
        "head": lambda: f32(h_kv),
        "expanded_head": lambda: f32(h_kv).expand(2, h_kv),
        "expanded_one": lambda: f32(1).expand(2, h_kv),
    }
    make = layouts.get(kind, DESCALES[kind])
    q, kv = e4m3(2, 16, h, 128), e4m3(2, 32, h_kv, 128)
    out, lse = flash_attn_func(q, kv, kv, causal=causal, q_descale=make(), k_descale=make(),
                               v_descale=make(), return_softmax_lse=True)
    assert out.shape == q.shape and out.dtype == BF16 and out.is_contiguous()
    assert lse.shape == (2, h, 16) and lse.dtype == F32
    assert flash_attn_func(q, kv, kv, causal=causal).dtype == BF16  # descales default to 1.0


@pytest.mark.parametrize("given", [(), ("q",), ("k",), ("v",), ("q", "v"), ("k", "v"),
                                   ("q", "k", "v"), ("q_expanded",)])
def test_fp8_forward_missing_descales_are_one(given):
    """FlashAttention 3 reads a missing descale as 1.0: flashcore passes a table of ones in its
    place, shaped as a given one (the given ones then made contiguous, so that all three index
    alike), or of one element when none is given."""
    q, kv = e4m3(2, 16, 8, 128), e4m3(2, 32, 2, 128)
    d = f32(1).expand(2, 2) if given == ("q_expanded",) else f32(2, 2)
    names = {"q": "q_descale", "k": "k_descale", "v": "v_descale", "q_expanded": "q_descale"}
    kw = {names[g]: d for g in given}
    assert _fp8(q, kv, **kw).shape == q.shape
    tables = _ops.qkv_descales(q, kv, kw.get("q_descale"), kw.get("k_descale"),
                               kw.get("v_descale"))
    assert all(t.dtype == F32 for t in tables)
    if not given:
        assert all(t.shape == (1,) for t in tables)
    elif len(given) == 3:
        assert all(t is d for t in tables)  # all given: passed on as they are
    else:
        assert all(t.shape == (2, 2) and t.is_contiguous() for t in tables)
    # A 16-bit q gets no q_descale (the Rust rules refuse one given with it), K/V theirs.
    q16 = meta(2, 16, 8, 128, dtype=BF16)
    assert _ops.qkv_descales(q16, kv, None, None, None)[0] is None
    assert _ops.qkv_descales(q16, meta(2, 32, 2, 128, dtype=BF16), None, None, None) == (
        None, None, None)


@pytest.mark.parametrize(
    "case,error,match",
    [
        ("k_bf16", ValueError, "k and v must be e4m3 too; k is bf16, v is e4m3"),
        ("v_bf16", ValueError, "k and v must be e4m3 too; k is e4m3, v is bf16"),
        ("kv_bf16", ValueError, "k and v must be e4m3 too"),
        ("q_bf16_with_q_descale", ValueError, "q_descale is given, but q is not e4m3"),
        ("all_bf16_with_q_descale", ValueError, "q_descale is given, but q is not e4m3"),
        ("q_e5m2", ValueError, "float8_e5m2"),
        ("q_descale_f16", ValueError, "q_descale must be torch.float32"),
        ("q_descale_f64", ValueError, "q_descale must be torch.float32"),
        ("q_descale_shape", ValueError, r"q_descale must have shape \(2, 2\)"),
        ("q_descale_rank3", ValueError, "q_descale must have shape"),
        ("q_descale_cpu", ValueError, "q_descale must be a CUDA tensor"),
        ("q_descale_cpu_alone", ValueError, "q_descale must be a CUDA tensor"),
        ("q_descale_not_tensor", TypeError, "q_descale must be a torch.Tensor"),
        ("q_descale_transposed", ValueError, "not a table the kernels can read"),
        ("q_descale_unlike_k", ValueError, "q_descale .* laid out alike"),
        ("k_descale_unlike_v", ValueError, "laid out alike"),
        ("q_stride_not_16_bytes", ValueError, "q head stride 40 bytes is not a multiple of 16"),
        ("head_dim_v", ValueError, "one head dim"),
        ("heads_must_divide", ValueError, "must divide"),
        ("head_dim_mismatch", ValueError, "shape mismatch"),
        ("dropout", NotImplementedError, "dropout"),
        ("varlen_q_e4m3", NotImplementedError,
         r"flash_attn_varlen_func with an fp8 \(float8_e4m3fn\) q is not implemented"),
        ("varlen_q_descale", NotImplementedError,
         "q_descale .* not implemented in flash_attn_varlen"),
        ("kvcache_q_e4m3", NotImplementedError,
         r"flash_attn_with_kvcache with an fp8 \(float8_e4m3fn\) q is not implemented"),
        ("kvcache_q_descale", NotImplementedError,
         "q_descale .* not implemented in flash_attn_with_kvcache"),
    ],
)
def test_fp8_forward_refusals(case, error, match):
    """Every bad mix is refused before anything launches: bad input as ValueError/TypeError,
    what is not implemented as NotImplementedError. (Zero, negative or non-finite factors are
    values on the GPU, and the modes and head dims no kernel takes are the kernels' to refuse
    when planned: test_gpu.py.)"""
    q, kv = e4m3(2, 16, 8, 128), e4m3(2, 32, 2, 128)
    kv16 = meta(2, 32, 2, 128, dtype=BF16)
    q16 = meta(2, 16, 8, 128, dtype=BF16)
    cu = i32(3)
    calls = {
        "k_bf16": lambda: _fp8(k=kv16, v=kv),
        "v_bf16": lambda: _fp8(k=kv, v=kv16),
        "kv_bf16": lambda: _fp8(k=kv16, v=kv16),
        "q_bf16_with_q_descale": lambda: _fp8(q=q16, q_descale=f32(2, 2)),
        "all_bf16_with_q_descale": lambda: _fp8(q=q16, k=kv16, v=kv16, q_descale=f32(2, 2)),
        "q_e5m2": lambda: _fp8(q=meta(2, 16, 8, 128, dtype=torch.float8_e5m2)),
        "q_descale_f16": lambda: _fp8(q_descale=meta(2, 2)),
        "q_descale_f64": lambda: _fp8(q_descale=meta(2, 2, dtype=torch.float64),
                                      k_descale=f32(2, 2), v_descale=f32(2, 2)),
        "q_descale_shape": lambda: _fp8(q_descale=f32(3, 2), k_descale=f32(3, 2),
                                        v_descale=f32(3, 2)),
        "q_descale_rank3": lambda: _fp8(q_descale=f32(2, 2, 1)),
        "q_descale_cpu": lambda: _fp8(q_descale=torch.ones(2, 2), k_descale=f32(2, 2),
                                      v_descale=f32(2, 2)),
        # The ones made for the missing k/v descales live on q's device, so the host table is
        # the one named.
        "q_descale_cpu_alone": lambda: _fp8(q_descale=torch.ones(2, 2)),
        "q_descale_not_tensor": lambda: _fp8(q_descale=1.0, k_descale=f32(2, 2),
                                             v_descale=f32(2, 2)),
        "q_descale_transposed": lambda: _fp8(q_descale=f32(2, 2).t(), k_descale=f32(2, 2).t(),
                                             v_descale=f32(2, 2).t()),
        "q_descale_unlike_k": lambda: _fp8(q_descale=f32(2), k_descale=f32(2, 2),
                                           v_descale=f32(2, 2)),
        "k_descale_unlike_v": lambda: _fp8(q_descale=f32(2, 2), k_descale=f32(2, 2),
                                           v_descale=f32(1)),
        # Heads of q 40 bytes apart (e4m3 rows are copied 16 bytes at a time).
        "q_stride_not_16_bytes": lambda: _fp8(
            q=torch.empty(2, 16, 2, 40, dtype=E4M3, device="meta")[..., :16],
            k=e4m3(2, 32, 1, 16)),
        "head_dim_v": lambda: _fp8(v=e4m3(2, 32, 2, 64)),
        "heads_must_divide": lambda: _fp8(k=e4m3(2, 32, 3, 128)),
        "head_dim_mismatch": lambda: _fp8(k=e4m3(2, 32, 2, 64)),
        "dropout": lambda: _fp8(dropout_p=0.1),
        "varlen_q_e4m3": lambda: flash_attn_varlen_func(e4m3(30, 8, 128), e4m3(50, 2, 128),
                                                        e4m3(50, 2, 128), cu, cu, 20, 30),
        "varlen_q_descale": lambda: flash_attn_varlen_func(
            meta(30, 8, 128, dtype=BF16), e4m3(50, 2, 128), e4m3(50, 2, 128), cu, cu, 20, 30,
            q_descale=f32(2, 2)),
        "kvcache_q_e4m3": lambda: _kvcache_call(q=e4m3(2, 1, 8, 128)),
        "kvcache_q_descale": lambda: _kvcache_call(q_descale=f32(2, 2)),
    }
    with pytest.raises(error, match=match):
        calls[case]()


def test_fp8_forward_skips_the_prepared_path(monkeypatch):
    """The prepared path keys 16-bit Q/K/V only: an fp8 call without descales reaches it only
    for it to decline (and to remember so, on a CUDA device), one with descales never does."""
    seen = []
    real = _ops.fwd_fast

    def spy(q, k, v, *args):
        seen.append(q.dtype)
        return real(q, k, v, *args)

    monkeypatch.setattr(_ops, "fwd_fast", spy)
    q, kv = e4m3(1, 16, 2, 128), e4m3(1, 16, 2, 128)
    _fp8(q, kv, q_descale=f32(1))
    assert seen == []
    assert _fp8(q, kv).dtype == BF16
    assert seen == [E4M3]


def test_fp8_forward_backward_refusal_rule():
    """The backward of an fp8 q is refused by the Rust checks as NotImplementedError (not as the
    bad input an e4m3 q is to the 16-bit dtype rules)."""
    q, kv = e4m3(1, 16, 2, 128), e4m3(1, 16, 2, 128)
    lse, o = f32(1, 2, 16), meta(1, 16, 2, 128, dtype=BF16)
    arg = _ops._shape_arg
    with pytest.raises(NotImplementedError, match=r"fp8 \(e4m3\) q, k and v have no backward"):
        flashcore._flashcore.backward(
            *(arg(t) for t in (o, q, kv, kv, o, lse, q, kv, kv)),
            (0.125, False, (-1, -1), 0.0), None, False, None, None, 0, 0, False, (0, 0), None, 0,
        )


def test_fp8_forward_autograd_refuses_its_backward(monkeypatch):
    """An fp8 q that requires grad runs the forward; its backward goes to the refusal (which
    raises NotImplementedError when it runs on the GPU: test_gpu.py; on meta tensors its fake
    would not, so it is spied on here)."""
    refused = []

    def spy(dout, what):
        refused.append(what)
        raise NotImplementedError(what)

    monkeypatch.setattr(_ops, "refuse_backward", spy)
    q = e4m3(1, 16, 2, 128).requires_grad_(True)
    kv = e4m3(1, 16, 2, 128)
    out = flash_attn_func(q, kv, kv, causal=True, q_descale=f32(1), k_descale=f32(1),
                          v_descale=f32(1))
    assert out.requires_grad and out.dtype == BF16
    with pytest.raises(NotImplementedError, match="q, k and v"):
        out.float().sum().backward()
    assert refused == ["flash_attn_func with fp8 (float8_e4m3fn) q, k and v"]


def test_fp8_forward_compile_fullgraph_traces():
    """Traced without a graph break (the ones of missing descales included), with q requiring
    grad too: its backward refuses when it runs."""
    def attend(q, k, v, q_descale, k_descale):
        return flash_attn_func(q, k, v, causal=True, q_descale=q_descale, k_descale=k_descale)

    q, kv = e4m3(2, 16, 8, 128), e4m3(2, 32, 2, 128)
    for d in (f32(2, 2), None):
        compiled = torch.compile(attend, fullgraph=True, backend="eager")
        out = compiled(q, kv, kv, d, d)
        assert out.shape == q.shape and out.dtype == BF16
    compiled = torch.compile(attend, fullgraph=True, backend="aot_eager")
    qg = e4m3(2, 16, 8, 128).requires_grad_(True)
    assert compiled(qg, kv, kv, f32(2), f32(2)).dtype == BF16


def test_fp8_forward_compile_traces_bad_descales_as_errors():
    compiled = torch.compile(
        lambda q, k, d: flash_attn_func(q, k, k, q_descale=d), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="q_descale must have shape"):
        compiled(e4m3(2, 16, 8, 128), e4m3(2, 32, 2, 128), f32(3, 2))


def test_fp8_opcheck_forward():
    q, kv = e4m3(2, 64, 8, 128), e4m3(2, 96, 2, 128)
    d = f32(2, 2)
    torch.library.opcheck(_ops.fwd, (q, kv, kv, 0.125, True, -1, -1, 0.0, None, False, d, d, d))
