"""GPU tests of flashcore's FlashAttention 2 interface, in the style of FlashAttention's
``tests/test_flash_attn.py``.

Every output is compared with a float32 PyTorch reference (:func:`attention_ref`, which follows
the repository's ``docs/MODES.md``) by FlashAttention's rule (:func:`assert_close`): flashcore's
largest error may be at most twice that of the same reference computed in the input dtype, plus
twice the dtype's rounding at the output's magnitude.

Run it on a CUDA machine with ``FLASHCORE_POISON_OUTPUTS=1`` (set here when unset, if flashcore
was not imported before): flashcore then fills every output with NaN before its kernels run, so
an element that no kernel writes fails the finiteness checks. Without a GPU every test is
skipped.
"""

import copy
import itertools
import math
import os
from functools import partial

import pytest
import torch

os.environ.setdefault("FLASHCORE_POISON_OUTPUTS", "1")

if torch.cuda.is_available():
    import flashcore
else:  # a CPU machine: every test below is skipped; flashcore need not even be installed
    flashcore = pytest.importorskip("flashcore")

from flashcore import (  # noqa: E402
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="flashcore's kernels need a CUDA GPU"
)

DEVICE = "cuda"

DTYPES = [torch.float16, torch.bfloat16]
HEAD_DIMS = [32, 64, 80, 96, 128, 192, 256]
WINDOWS = [(-1, -1), (32, 0), (64, 16)]
SOFTCAPS = [0.0, 30.0]
ALIBI = [None, "head", "batch_head"]  # slopes (nheads,) or (batch, nheads)
GQA = [(6, 6), (6, 2), (6, 1)]  # (nheads, nheads_k): MHA, GQA, MQA
# FlashAttention's odd shapes (seqlen_q, seqlen_k): decode, ragged tiles, seqlen_q < seqlen_k,
# seqlen_q > seqlen_k (causal rows that see no key), and one long problem.
SHAPES = [(1, 239), (113, 203), (128, 217), (256, 512), (108, 256), (512, 256), (1024, 1024)]
# The full mode grid gives each shape one head layout, cycling through GQA (the head-dim grid
# below crosses every head layout with every head dim).
MODE_SHAPES = [(sq, sk, *GQA[i % len(GQA)]) for i, (sq, sk) in enumerate(SHAPES)]
HEAD_DIM_SHAPES = [(1, 239), (113, 203), (512, 256), (1024, 1024)]
# Every mode at once, for the grids that cross head dims, storage and head layouts.
ALL_MODES = dict(window_size=(64, 16), softcap=30.0, alibi="batch_head")
NO_MODES = dict(window_size=(-1, -1), softcap=0.0, alibi=None)
MODE_SETS = {"plain": NO_MODES, "all_modes": ALL_MODES}

# The LSE's term of the rule (in nats), stated once: the reference's LSE in the input dtype
# carries the rounding of its scores, and flashcore's may differ from the float32 one by at most
# twice that, plus this.
LSE_ATOL = 1e-3


_IDS = {
    "dtype": lambda x: {torch.float16: "fp16", torch.bfloat16: "bf16"}[x],
    "d": "d{}".format,
    "causal": lambda x: "causal" if x else "noncausal",
    "window_size": lambda x: "window{}_{}".format(*x),
    "softcap": "softcap{:g}".format,
    "alibi": "alibi_{}".format,
    "page_block_size": "page{}".format,
    "seqlen_q": "sq{}".format,
    "seqlen": "s{}".format,
    "append": lambda x: "append" if x else "noappend",
    "seqlens_as": "seqlens_{}".format,
}


def _id(name, value):
    return _IDS[name](value) if name in _IDS else str(value)


def parametrize(names, values):
    """``pytest.mark.parametrize`` with readable ids (``bf16``, ``window64_16``, ...); tuples of
    several names read as their values joined (``113x203x6x2``)."""
    if "," in names:
        ids = [("x" if all(isinstance(e, int) for e in v) else "-").join(str(e) for e in v)
               for v in values]
    else:
        ids = [_id(names, v) for v in values]
    return pytest.mark.parametrize(names, values, ids=ids)


def every_mode(test):
    """The full mode grid over a test's ``causal``, ``window_size``, ``softcap`` and ``alibi``:
    the four ``parametrize`` marks, stacked above the test's own ones in one place."""
    for mark in (parametrize("causal", [False, True]), parametrize("window_size", WINDOWS),
                 parametrize("softcap", SOFTCAPS), parametrize("alibi", ALIBI)):
        test = mark(test)
    return test


@pytest.fixture(autouse=True)
def _defaults():
    """IEEE float32 matmuls for the reference (no TF32) and flashcore's defaults (table checks
    on, batch-invariant mode off), restored afterwards."""
    precision = torch.get_float32_matmul_precision()
    checks, invariant = flashcore.table_checks(), flashcore.batch_invariant()
    torch.set_float32_matmul_precision("highest")
    flashcore.set_table_checks(True)
    flashcore.set_batch_invariant(False)
    yield
    torch.set_float32_matmul_precision(precision)
    flashcore.set_table_checks(checks)
    flashcore.set_batch_invariant(invariant)


# ---- the reference ----


def attention_ref(
    q,
    k,
    v,
    *,
    causal=False,
    window_size=(-1, -1),
    softcap=0.0,
    alibi_slopes=None,
    seqlens_k=None,
    softmax_scale=None,
    upcast=True,
):
    """Attention as ``docs/MODES.md`` defines it, for q ``(batch, seqlen_q, nheads, d)`` and k, v
    ``(batch, seqlen_k, nheads_k, d)`` (K/V heads repeated for GQA); ``seqlens_k`` ``(batch,)``:
    the keys of sequence b are its first ``seqlens_k[b]`` rows (a cache), all by default; the
    rows past them are never read (zeroed here, so that NaN there stays out).

    With ``s = scale·q·k``, the logit is ``s' = softcap·tanh(s/softcap)`` (softcap > 0), then
    ``s'' = s' - slope(b, h)·|i + off - j|`` (ALiBi), with ``off = len_k(b) - seqlen_q``
    (bottom-right alignment). Key j is visible to query i iff ``j < len_k(b)``,
    ``j >= i + off - left`` (left >= 0) and ``j <= i + off + right`` (right >= 0; causal is
    right = 0). A row that sees no key gives O = 0 and LSE = +inf.

    ``upcast=True``: everything in float32. ``upcast=False``: Q·Kᵀ, the scale and softcap in the
    input dtype, the probabilities rounded to it and P·V in it (bias, mask and softmax in
    float32, as FlashAttention's reference does with a bias): the yardstick of the tolerance rule.
    Returns out ``(batch, seqlen_q, nheads, d)`` (float32, or the input dtype) and LSE
    ``(batch, nheads, seqlen_q)`` float32."""
    batch, seqlen_q, nheads, d = q.shape
    seqlen_k, nheads_k = k.shape[1], k.shape[2]
    dev = q.device
    if seqlens_k is None:
        seqlens_k = [seqlen_k] * batch
    len_k = torch.as_tensor(seqlens_k, device=dev).view(-1, 1, 1, 1)
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    stored = torch.arange(seqlen_k, device=dev).view(1, -1, 1, 1) < len_k.view(-1, 1, 1, 1)
    k, v = (torch.where(stored, t, 0.0).to(t.dtype) for t in (k, v))
    k = k.repeat_interleave(nheads // nheads_k, dim=2)
    v = v.repeat_interleave(nheads // nheads_k, dim=2)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    scores = torch.einsum("bqhd,bkhd->bhqk", q * scale, k)
    if softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.float()

    i = torch.arange(seqlen_q, device=dev).view(1, 1, -1, 1)
    j = torch.arange(seqlen_k, device=dev).view(1, 1, 1, -1)
    diag = i + len_k - seqlen_q  # the key position aligned with query row i
    left, right = window_size
    if causal:
        right = 0
    visible = j < len_k
    if left >= 0:
        visible = visible & (j >= diag - left)
    if right >= 0:
        visible = visible & (j <= diag + right)
    if alibi_slopes is not None:
        slopes = alibi_slopes.float().view(-1, nheads, 1, 1)
        scores = scores - slopes * (diag - j).abs()
    scores = torch.where(visible, scores, float("-inf"))

    empty = ~visible.any(dim=-1)  # (batch, 1, seqlen_q): rows that see no key
    lse = torch.where(empty, float("inf"), torch.logsumexp(scores, dim=-1))
    probs = torch.where(empty.unsqueeze(-1), 0.0, torch.softmax(scores, dim=-1))
    out = torch.einsum("bhqk,bkhd->bqhd", probs.to(v.dtype), v)
    return out, lse


def varlen_ref(q, seqlens_q, ks, vs, *, alibi_slopes=None, **modes):
    """:func:`attention_ref` per sequence: packed q ``(total_q, nheads, d)`` with sequence b's
    rows ``seqlens_q[b]`` long, and its keys ``ks[b]``, ``vs[b]`` ``(len_k(b), nheads_k, d)``.
    Returns out ``(total_q, nheads, d)`` and LSE ``(nheads, total_q)``."""
    outs, lses = [], []
    for b, (qb, kb, vb) in enumerate(zip(torch.split(q, seqlens_q), ks, vs)):
        slopes = alibi_slopes
        if slopes is not None and slopes.dim() == 2:
            slopes = slopes[b]
        out, lse = attention_ref(qb[None], kb[None], vb[None], alibi_slopes=slopes, **modes)
        outs.append(out[0])
        lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses, dim=-1)


def ref_with_grads(ref_fn, inputs, dout, upcast):
    """``ref_fn(*inputs, upcast=upcast)``'s output and its gradients for ``dout``, taken on
    leaves of the reference's own precision (float32 copies with ``upcast``)."""
    leaves = [(t.detach().float() if upcast else t.detach()).requires_grad_() for t in inputs]
    out = ref_fn(*leaves, upcast=upcast)
    grads = torch.autograd.grad(out, leaves, dout.float() if upcast else dout)
    return out.detach(), grads


# ---- the tolerance rule, written once ----


def _fa_rule(name, actual, ref, ref_lp, atol):
    """``max|actual - ref| <= 2·max|ref_lp - ref| + atol`` over the elements where the float32
    reference ``ref`` is finite; where it is +inf (the LSE of a row that sees no key), ``actual``
    must be +inf too. Every compared element must be finite (a NaN left by
    FLASHCORE_POISON_OUTPUTS is an unwritten element)."""
    actual, ref_lp = actual.detach().float(), ref_lp.detach().float()
    assert actual.shape == ref.shape, f"{name}: shape {tuple(actual.shape)}, expected {tuple(ref.shape)}"
    inf = torch.isinf(ref)
    assert torch.equal(torch.isinf(ref_lp), inf), f"{name}: the two references disagree on the mask"
    assert bool((actual[inf] == ref[inf]).all()), f"{name}: rows that see no key must give {ref[inf][:1]}"
    finite = ~inf
    bad = int((~torch.isfinite(actual[finite])).sum())
    assert bad == 0, f"{name}: {bad} non-finite elements where the reference is finite (unwritten?)"
    if not finite.any():
        return
    err = (actual[finite] - ref[finite]).abs().max().item()
    err_lp = (ref_lp[finite] - ref[finite]).abs().max().item()
    assert err <= 2 * err_lp + atol, (
        f"{name}: max error {err:.3g} > 2 x {err_lp:.3g} (the reference in the input dtype) "
        f"+ {atol:.3g}"
    )


def assert_close(name, actual, ref, ref_lp):
    """FlashAttention's rule for outputs and gradients: ``ref`` is the float32 reference,
    ``ref_lp`` the same computed in ``actual``'s dtype; atol is FlashAttention 3's
    ``2·max|ref + 0.3 - 0.3 - ref|`` evaluated in that dtype (its rounding at that magnitude)."""
    r = ref.detach().to(actual.dtype)
    atol = 2 * (r + 0.3 - 0.3 - r).abs().max().item() if r.numel() else 0.0
    _fa_rule(name, actual, ref, ref_lp, atol)


def assert_lse_close(lse, ref, ref_lp):
    """The same rule for softmax_lse (float32), with :data:`LSE_ATOL` for the atol."""
    _fa_rule("softmax_lse", lse, ref, ref_lp, LSE_ATOL)


def assert_bitwise_equal(name, actual, expected):
    """Bit-identical (NaN payloads included: the tensors are compared as integers)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, name
    ints = {2: torch.int16, 4: torch.int32}[actual.element_size()]
    same = actual.contiguous().view(ints) == expected.contiguous().view(ints)
    assert bool(same.all()), f"{name}: {int((~same).sum())} of {same.numel()} elements differ"


def check_attention(out, lse, ref_fn):
    """``out``/``lse`` against ``ref_fn(upcast=...)``'s float32 and input-dtype results."""
    with torch.no_grad():
        out_ref, lse_ref = ref_fn(upcast=True)
        out_lp, lse_lp = ref_fn(upcast=False)
    assert_close("out", out, out_ref, out_lp)
    if lse is not None:
        assert_lse_close(lse, lse_ref, lse_lp)


# ---- inputs ----


def randn(shape, dtype, scale=1.0, requires_grad=False):
    t = (torch.randn(shape, device=DEVICE) * scale).to(dtype)
    return t.requires_grad_(requires_grad)


def q_scale(softcap):
    """FlashAttention 3's test scales q by softcap/4 so that the scores reach the cap."""
    return softcap / 4 if softcap > 0 else 1.0


def make_alibi(kind, batch, nheads):
    if kind is None:
        return None
    shape = (nheads,) if kind == "head" else (batch, nheads)
    return torch.rand(shape, device=DEVICE, dtype=torch.float32) * 0.3


def random_lengths(batch, max_len, zero_at):
    """Random lengths in 1..max_len; the first is max_len, the one at ``zero_at`` is 0."""
    lens = torch.randint(1, max_len + 1, (batch,)).tolist()
    lens[0], lens[zero_at] = max_len, 0
    return lens


def cu_seqlens(lens):
    return torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device=DEVICE)


def paged(k_logical, v_logical, block_size, spare_blocks=3, fill=None):
    """Logical caches ``(batch, max_blocks · block_size, nheads_k, d)`` as paged ones: pools
    ``(num_blocks, block_size, nheads_k, d)`` whose blocks sit in a shuffled order behind an
    int32 block table ``(batch, max_blocks)``; spare blocks hold random values (or ``fill``)."""
    batch, capacity, nheads_k, d = k_logical.shape
    assert capacity % block_size == 0
    max_blocks = capacity // block_size
    num_blocks = batch * max_blocks + spare_blocks
    ids = torch.randperm(num_blocks, device=DEVICE)[: batch * max_blocks]
    pools = []
    for logical in (k_logical, v_logical):
        pool = randn((num_blocks, block_size, nheads_k, d), logical.dtype)
        if fill is not None:
            pool.fill_(fill)
        rows = logical.reshape(-1, block_size, nheads_k, d)
        if pool.element_size() == 1:  # fp8: moved as its bytes
            pool.view(torch.uint8)[ids] = rows.view(torch.uint8)
        else:
            pool[ids] = rows
        pools.append(pool)
    return pools[0], pools[1], ids.view(batch, max_blocks).to(torch.int32)


# ---- flash_attn_func and its packed forms ----


def check_flash_attn_func(batch, seqlen_q, seqlen_k, nheads, nheads_k, d, dtype, causal,
                          window_size, softcap, alibi, layout="bshd"):
    torch.manual_seed(0)
    scale = q_scale(softcap)
    if layout == "bshd":
        q = randn((batch, seqlen_q, nheads, d), dtype, scale)
        k = randn((batch, seqlen_k, nheads_k, d), dtype)
        v = randn((batch, seqlen_k, nheads_k, d), dtype)
    else:  # transposes of (batch, nheads, seqlen, d) tensors: head dim contiguous, rest not
        q = randn((batch, nheads, seqlen_q, d), dtype, scale).transpose(1, 2)
        k = randn((batch, nheads_k, seqlen_k, d), dtype).transpose(1, 2)
        v = randn((batch, nheads_k, seqlen_k, d), dtype).transpose(1, 2)
        assert not q.is_contiguous() and q.stride(-1) == 1
    modes = dict(causal=causal, window_size=window_size, softcap=softcap,
                 alibi_slopes=make_alibi(alibi, batch, nheads))
    out, lse = flash_attn_func(q, k, v, **modes, return_softmax_lse=True)
    assert lse.shape == (batch, nheads, seqlen_q) and lse.dtype == torch.float32
    check_attention(out, lse, partial(attention_ref, q, k, v, **modes))


@every_mode
@parametrize("seqlen_q,seqlen_k,nheads,nheads_k", MODE_SHAPES)
@parametrize("d", [64, 128])
@parametrize("dtype", DTYPES)
def test_flash_attn_output(seqlen_q, seqlen_k, nheads, nheads_k, d, dtype, causal, window_size,
                           softcap, alibi):
    """The full mode grid at head dims 64 and 128."""
    check_flash_attn_func(2, seqlen_q, seqlen_k, nheads, nheads_k, d, dtype, causal, window_size,
                          softcap, alibi)


@parametrize("modes", list(MODE_SETS))
@parametrize("causal", [False, True])
@parametrize("seqlen_q,seqlen_k", HEAD_DIM_SHAPES)
@parametrize("nheads,nheads_k", GQA)
@parametrize("d", HEAD_DIMS)
@parametrize("dtype", DTYPES)
def test_flash_attn_head_dims(seqlen_q, seqlen_k, nheads, nheads_k, d, dtype, causal, modes):
    """Every head dim, every head layout, with no mode or with all of them."""
    check_flash_attn_func(2, seqlen_q, seqlen_k, nheads, nheads_k, d, dtype, causal,
                          **MODE_SETS[modes])


@parametrize("modes", list(MODE_SETS))
@parametrize("causal", [False, True])
@parametrize("seqlen_q,seqlen_k", [(113, 203), (512, 256)])
@parametrize("nheads,nheads_k", [(6, 6), (6, 2)])
@parametrize("d", [64, 128])
@parametrize("dtype", DTYPES)
def test_flash_attn_bhsd_layout(seqlen_q, seqlen_k, nheads, nheads_k, d, dtype, causal, modes):
    """q, k, v as transposes of (batch, nheads, seqlen, d) tensors."""
    check_flash_attn_func(2, seqlen_q, seqlen_k, nheads, nheads_k, d, dtype, causal,
                          layout="bhsd", **MODE_SETS[modes])


def test_flash_attn_func_returns_out_only_by_default():
    torch.manual_seed(0)
    q, k, v = (randn((1, 64, 2, 64), torch.float16) for _ in range(3))
    out = flash_attn_func(q, k, v)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape
    check_attention(out, None, partial(attention_ref, q, k, v))


# ---- the prepared eager path: flash_attn_func without ALiBi or LSE ----


def _general_path_forbidden(*args, **kwargs):
    raise AssertionError("the call took the general path, not the prepared one")


def _forbid_general_path(monkeypatch):
    monkeypatch.setattr(flashcore._ops, "fwd_eager", _general_path_forbidden)
    monkeypatch.setattr(flashcore._ops, "fwd", _general_path_forbidden)


@parametrize("layout", ["bshd", "bhsd"])
@parametrize("window_size,softcap", [((-1, -1), 0.0), ((64, 16), 30.0)])
@parametrize("causal", [False, True])
@parametrize("nheads,nheads_k", GQA)
@parametrize("d", HEAD_DIMS)
@parametrize("dtype", DTYPES)
def test_prepared_forward(d, dtype, nheads, nheads_k, causal, window_size, softcap, layout,
                          monkeypatch):
    """Calls of one shape share one prepared plan: the first prepares it, the next ones launch
    it on new data (the general path forbidden), each into a fresh output, each correct."""
    outs = []
    for seed in range(3):
        torch.manual_seed(seed)
        if seed == 1:
            _forbid_general_path(monkeypatch)
        if layout == "bshd":
            q = randn((2, 113, nheads, d), dtype, q_scale(softcap))
            k, v = (randn((2, 203, nheads_k, d), dtype) for _ in range(2))
        else:
            q = randn((2, nheads, 113, d), dtype, q_scale(softcap)).transpose(1, 2)
            k, v = (randn((2, nheads_k, 203, d), dtype).transpose(1, 2) for _ in range(2))
        modes = dict(causal=causal, window_size=window_size, softcap=softcap)
        out = flash_attn_func(q, k, v, **modes)
        assert out.is_contiguous() and out.shape == q.shape
        check_attention(out, None, partial(attention_ref, q, k, v, **modes))
        outs.append(out)
    assert len({o.data_ptr() for o in outs}) == 3
    assert sum(bool(e) for e in flashcore._ops._prepared.values()) == 1


def test_prepared_forward_misaligned_base_falls_back():
    """A q whose base is one element past the kernels' alignment has the prepared plan's key
    (same shape and strides as an aligned view): the prepared generation refuses it and the
    general path's fallback takes it, correctly; the aligned view keeps the prepared path."""
    torch.manual_seed(0)
    buf = randn((1, 200, 4, 72), torch.float16)
    k, v = (randn((1, 200, 4, 64), torch.float16) for _ in range(2))
    for _ in range(2):
        for offset in (0, 1):
            q = buf[..., offset:offset + 64]
            assert q.stride(-1) == 1 and (q.data_ptr() % 16 != 0) == (offset == 1)
            out = flash_attn_func(q, k, v, causal=True)
            check_attention(out, None, partial(attention_ref, q, k, v, causal=True))
    assert sum(bool(e) for e in flashcore._ops._prepared.values()) == 1


def test_prepared_forward_follows_batch_invariant_mode():
    """Plans prepared before the batch-invariant mode is turned on are dropped with it: one
    sequence's output is then bit-identical alone and in a batch of eight (decode-like shapes,
    where the split of the keys depends on the batch)."""
    torch.manual_seed(0)
    q = randn((8, 1, 8, 128), torch.bfloat16)
    k, v = (randn((8, 4096, 2, 128), torch.bfloat16) for _ in range(2))
    for invariant in (False, True):
        flashcore.set_batch_invariant(invariant)
        full = flash_attn_func(q, k, v)
        alone = flash_attn_func(q[:1], k[:1], v[:1])
    assert_bitwise_equal("out", alone[0], full[0])


@parametrize("modes", list(MODE_SETS))
@parametrize("causal", [False, True])
@parametrize("seqlen", [113, 256])
@parametrize("d", [64, 128])
@parametrize("dtype", DTYPES)
def test_flash_attn_qkvpacked(seqlen, d, dtype, causal, modes):
    torch.manual_seed(0)
    batch, nheads = 2, 6
    m = MODE_SETS[modes]
    qkv = randn((batch, seqlen, 3, nheads, d), dtype)
    qkv[:, :, 0] *= q_scale(m["softcap"])
    q, k, v = qkv.unbind(2)  # views: non-contiguous, head dim contiguous
    modes = dict(causal=causal, window_size=m["window_size"], softcap=m["softcap"],
                 alibi_slopes=make_alibi(m["alibi"], batch, nheads))
    out, lse = flash_attn_qkvpacked_func(qkv, **modes, return_softmax_lse=True)
    check_attention(out, lse, partial(attention_ref, q, k, v, **modes))


@parametrize("causal", [False, True])
@parametrize("nheads,nheads_k", GQA)
@parametrize("seqlen_q,seqlen_k", [(1, 239), (113, 203), (512, 256)])
@parametrize("d", [64, 128])
@parametrize("dtype", DTYPES)
def test_flash_attn_kvpacked(seqlen_q, seqlen_k, nheads, nheads_k, d, dtype, causal):
    torch.manual_seed(0)
    batch = 2
    q = randn((batch, seqlen_q, nheads, d), dtype)
    kv = randn((batch, seqlen_k, 2, nheads_k, d), dtype)
    out, lse = flash_attn_kvpacked_func(q, kv, causal=causal, return_softmax_lse=True)
    check_attention(out, lse, partial(attention_ref, q, kv[:, :, 0], kv[:, :, 1], causal=causal))


# ---- gradients ----


def check_grads(names, ref_fn, inputs, out, dout, skip_unsupported=True):
    """flashcore's gradients of ``inputs`` for ``dout`` (a skip, with the reason, when no backward
    kernel takes the call and ``skip_unsupported``; a failure otherwise) against the references'
    by the rule; ``ref_fn(*inputs, upcast=...)`` gives the reference's output. Each gradient is
    NaN-poisoned before the kernels run (FLASHCORE_POISON_OUTPUTS), so an element no kernel
    writes fails the rule's finiteness check."""
    try:
        grads = torch.autograd.grad(out, inputs, dout)
    except NotImplementedError as e:
        if not skip_unsupported:
            raise
        pytest.skip(f"no backward kernel takes this call: {e}")
    _, grads_ref = ref_with_grads(ref_fn, inputs, dout, upcast=True)
    _, grads_lp = ref_with_grads(ref_fn, inputs, dout, upcast=False)
    assert len(names) == len(inputs)
    for name, g, g_ref, g_lp in zip(names, grads, grads_ref, grads_lp):
        assert_close(name, g, g_ref, g_lp)


@parametrize("causal", [False, True])
@parametrize("seqlen_q,seqlen_k", [(1, 239), (113, 203), (128, 217), (512, 256), (1024, 1024)])
@parametrize("nheads,nheads_k", GQA)
@parametrize("d", [64, 80, 96, 128, 256])
@parametrize("dtype", DTYPES)
def test_flash_attn_grad(seqlen_q, seqlen_k, nheads, nheads_k, d, dtype, causal):
    torch.manual_seed(0)
    batch = 2
    q = randn((batch, seqlen_q, nheads, d), dtype, requires_grad=True)
    k = randn((batch, seqlen_k, nheads_k, d), dtype, requires_grad=True)
    v = randn((batch, seqlen_k, nheads_k, d), dtype, requires_grad=True)
    out, lse = flash_attn_func(q, k, v, causal=causal, return_softmax_lse=True)
    ref = partial(attention_ref, causal=causal)
    check_attention(out, lse, partial(ref, q, k, v))
    dout = randn(out.shape, dtype)
    ref_out = lambda *t, upcast: ref(*t, upcast=upcast)[0]  # noqa: E731
    check_grads(("dq", "dk", "dv"), ref_out, (q, k, v), out, dout)


@parametrize("causal", [False, True])
@parametrize("packing", ["qkv", "kv", "bhsd"])
@parametrize("dtype", DTYPES)
def test_flash_attn_grad_strided(packing, dtype, causal):
    """Gradients through packed views and transposed layouts (the inputs' strides)."""
    torch.manual_seed(0)
    batch, seqlen, nheads, d = 2, 197, 6, 64
    ref = partial(attention_ref, causal=causal)
    if packing == "qkv":
        leaf = randn((batch, seqlen, 3, nheads, d), dtype, requires_grad=True)
        out = flash_attn_qkvpacked_func(leaf, causal=causal)
        ref_fn = lambda x, upcast: ref(*x.unbind(2), upcast=upcast)[0]  # noqa: E731
        leaves, names = (leaf,), ("dqkv",)
    elif packing == "kv":
        q = randn((batch, seqlen, nheads, d), dtype, requires_grad=True)
        kv = randn((batch, seqlen + 31, 2, 2, d), dtype, requires_grad=True)
        out = flash_attn_kvpacked_func(q, kv, causal=causal)
        ref_fn = lambda q, kv, upcast: ref(q, *kv.unbind(2), upcast=upcast)[0]  # noqa: E731
        leaves, names = (q, kv), ("dq", "dkv")
    else:
        leaves = tuple(randn((batch, nheads, seqlen, d), dtype, requires_grad=True)
                       for _ in range(3))
        out = flash_attn_func(*(t.transpose(1, 2) for t in leaves), causal=causal)
        ref_fn = lambda *t, upcast: ref(*(x.transpose(1, 2) for x in t),  # noqa: E731
                                        upcast=upcast)[0]
        names = ("dq", "dk", "dv")
    with torch.no_grad():
        out_ref, out_lp = ref_fn(*leaves, upcast=True), ref_fn(*leaves, upcast=False)
    assert_close("out", out, out_ref, out_lp)
    check_grads(names, ref_fn, leaves, out, randn(out.shape, dtype))


@parametrize("causal", [False, True])
@parametrize("d", [64, 128])
@parametrize("dtype", DTYPES)
def test_flash_attn_deterministic_backward(d, dtype, causal):
    """deterministic=True: five backward calls give bit-identical dq, dk, dv."""
    torch.manual_seed(0)
    batch, seqlen_q, seqlen_k, nheads, nheads_k = 2, 384, 512, 6, 2
    q = randn((batch, seqlen_q, nheads, d), dtype, requires_grad=True)
    k = randn((batch, seqlen_k, nheads_k, d), dtype, requires_grad=True)
    v = randn((batch, seqlen_k, nheads_k, d), dtype, requires_grad=True)
    out = flash_attn_func(q, k, v, causal=causal, deterministic=True)
    dout = randn(out.shape, dtype)
    try:
        first = torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    except NotImplementedError as e:
        pytest.skip(f"no deterministic backward kernel takes this call: {e}")
    for _ in range(4):
        again = torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        for name, a, b in zip(("dq", "dk", "dv"), again, first):
            assert_bitwise_equal(name, a, b)
    ref = lambda *t, upcast: attention_ref(*t, causal=causal, upcast=upcast)[0]  # noqa: E731
    _, grads_ref = ref_with_grads(ref, (q, k, v), dout, upcast=True)
    _, grads_lp = ref_with_grads(ref, (q, k, v), dout, upcast=False)
    for name, g, g_ref, g_lp in zip(("dq", "dk", "dv"), first, grads_ref, grads_lp):
        assert_close(name, g, g_ref, g_lp)


GRAD_SHAPES = [(1, 239, 6, 6), (113, 203, 6, 2), (512, 256, 6, 1)]


@every_mode
@parametrize("seqlen_q,seqlen_k,nheads,nheads_k", GRAD_SHAPES)
@parametrize("d", [64, 128])
@parametrize("dtype", DTYPES)
def test_flash_attn_grad_modes(seqlen_q, seqlen_k, nheads, nheads_k, d, dtype, causal,
                               window_size, softcap, alibi):
    """The backward with every mode the forward takes (windows, causal, softcap, ALiBi per head
    and per (batch, head)), MHA/GQA/MQA, decode and seqlen_q > seqlen_k (causal rows that see no
    key): dq, dk, dv against the float32 reference's autograd by the rule. A backward kernel
    takes each of these calls, so a refusal fails the test."""
    torch.manual_seed(0)
    batch = 2
    q = randn((batch, seqlen_q, nheads, d), dtype, q_scale(softcap), requires_grad=True)
    k = randn((batch, seqlen_k, nheads_k, d), dtype, requires_grad=True)
    v = randn((batch, seqlen_k, nheads_k, d), dtype, requires_grad=True)
    modes = dict(causal=causal, window_size=window_size, softcap=softcap,
                 alibi_slopes=make_alibi(alibi, batch, nheads))
    out, lse = flash_attn_func(q, k, v, **modes, return_softmax_lse=True)
    check_attention(out, lse, partial(attention_ref, q, k, v, **modes))
    ref_out = lambda *t, upcast: attention_ref(*t, **modes, upcast=upcast)[0]  # noqa: E731
    check_grads(("dq", "dk", "dv"), ref_out, (q, k, v), out, randn(out.shape, dtype),
                skip_unsupported=False)


@parametrize("modes", list(MODE_SETS))
@parametrize("causal", [False, True])
@parametrize("dtype", DTYPES)
def test_flash_attn_qkvpacked_grad_modes(dtype, causal, modes):
    """The modes' backward through a packed qkv leaf (its views' strides)."""
    torch.manual_seed(0)
    batch, seqlen, nheads, d = 2, 197, 6, 64
    m = MODE_SETS[modes]
    qkv = randn((batch, seqlen, 3, nheads, d), dtype)
    qkv[:, :, 0] *= q_scale(m["softcap"])
    qkv.requires_grad_()
    kw = dict(causal=causal, window_size=m["window_size"], softcap=m["softcap"],
              alibi_slopes=make_alibi(m["alibi"], batch, nheads))
    out = flash_attn_qkvpacked_func(qkv, **kw)
    ref_fn = lambda x, upcast: attention_ref(*x.unbind(2), **kw, upcast=upcast)[0]  # noqa: E731
    check_grads(("dqkv",), ref_fn, (qkv,), out, randn(out.shape, dtype), skip_unsupported=False)


@parametrize("varlen", [False, True])
@parametrize("dtype", DTYPES)
def test_deterministic_backward_modes(dtype, varlen):
    """deterministic=True with a window, softcap and ALiBi, dense and varlen: five backward
    calls give bit-identical dq, dk, dv, and they pass the rule."""
    torch.manual_seed(0)
    nheads, nheads_k, d = 6, 2, 64
    if varlen:
        lens_q, lens_k = [113, 0, 57, 200], [203, 64, 0, 150]
        cu_q, cu_k = cu_seqlens(lens_q), cu_seqlens(lens_k)
        q = randn((sum(lens_q), nheads, d), dtype, q_scale(30.0), requires_grad=True)
        k = randn((sum(lens_k), nheads_k, d), dtype, requires_grad=True)
        v = randn((sum(lens_k), nheads_k, d), dtype, requires_grad=True)
        modes = dict(causal=True, window_size=(64, 16), softcap=30.0,
                     alibi_slopes=make_alibi("batch_head", len(lens_q), nheads))
        out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), **modes,
                                     deterministic=True)
        ref = lambda q, k, v, upcast: varlen_ref(  # noqa: E731
            q, lens_q, torch.split(k, lens_k), torch.split(v, lens_k), **modes, upcast=upcast)[0]
    else:
        q = randn((2, 384, nheads, d), dtype, q_scale(30.0), requires_grad=True)
        k = randn((2, 512, nheads_k, d), dtype, requires_grad=True)
        v = randn((2, 512, nheads_k, d), dtype, requires_grad=True)
        modes = dict(causal=True, window_size=(64, 16), softcap=30.0,
                     alibi_slopes=make_alibi("batch_head", 2, nheads))
        out = flash_attn_func(q, k, v, **modes, deterministic=True)
        ref = lambda *t, upcast: attention_ref(*t, **modes, upcast=upcast)[0]  # noqa: E731
    dout = randn(out.shape, dtype)
    first = torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    for _ in range(4):
        again = torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        for name, a, b in zip(("dq", "dk", "dv"), again, first):
            assert_bitwise_equal(name, a, b)
    _, grads_ref = ref_with_grads(ref, (q, k, v), dout, upcast=True)
    _, grads_lp = ref_with_grads(ref, (q, k, v), dout, upcast=False)
    for name, g, g_ref, g_lp in zip(("dq", "dk", "dv"), first, grads_ref, grads_lp):
        assert_close(name, g, g_ref, g_lp)


@parametrize("causal", [False, True])
@parametrize("dtype", DTYPES)
def test_forward_after_backward_on_one_stream(dtype, causal):
    """A training step's next forward: a backward writes scratch (its D vector) into the
    stream's workspace where a forward's tile counters and a decode's split counters go, and the
    forward after it must still give its first output, bit for bit. Shapes big enough for the
    persistent forward's dynamic scheduler and a split-KV decode."""
    torch.manual_seed(0)
    q, k, v = (randn((4, 2048, 16, 128), dtype, requires_grad=True) for _ in range(3))
    first = flash_attn_func(q, k, v, causal=causal)
    q1, k1, v1 = (t.detach()[:1].contiguous() for t in (q, k, v))
    decode_first = flash_attn_with_kvcache(q1[:, :1], k1, v1, causal=True)
    for deterministic in (False, True):
        out = flash_attn_func(q, k, v, causal=causal, deterministic=deterministic)
        out.backward(randn(out.shape, dtype))
        assert_bitwise_equal("out after a backward", flash_attn_func(q, k, v, causal=causal), first)
        assert_bitwise_equal("decode after a backward",
                             flash_attn_with_kvcache(q1[:, :1], k1, v1, causal=True), decode_first)


@parametrize("mode", ["paged", "kvcache"])
def test_backward_not_implemented(mode):
    """What has no backward (docs/PYTHON.md): a paged K/V raises NotImplementedError from
    .backward(); flash_attn_with_kvcache refuses inputs that require grad at the call."""
    torch.manual_seed(0)
    dtype, batch, seqlen, nheads, d = torch.bfloat16, 2, 128, 4, 64
    q = randn((batch, seqlen, nheads, d), dtype, requires_grad=True)
    k = randn((batch, seqlen, nheads, d), dtype, requires_grad=True)
    v = randn((batch, seqlen, nheads, d), dtype, requires_grad=True)
    cu = cu_seqlens([seqlen] * batch)
    if mode == "paged":
        k_pool, v_pool, table = paged(k.detach(), v.detach(), 64)
        k_pool.requires_grad_()
        out = flash_attn_varlen_func(q.flatten(0, 1), k_pool, v_pool, cu, cu, seqlen, seqlen,
                                     block_table=table)
    else:
        # Inference only: refused at the call when an input requires grad.
        with pytest.raises(NotImplementedError, match="inference only"):
            flash_attn_with_kvcache(q, k.detach().clone(), v.detach().clone(),
                                    cache_seqlens=seqlen // 2)
        return
    assert torch.isfinite(out).all()
    with pytest.raises(NotImplementedError, match="paged K/V"):
        out.float().sum().backward()


# ---- V's own head dim (FlashAttention 3's headdim_v: DeepSeek-V2/V3 prefill's 192 and 128) ----


@parametrize("want_lse", [False, True])
@parametrize("modes", list(MODE_SETS))
@parametrize("causal", [False, True])
@parametrize("nheads,nheads_k", GQA)
@parametrize("dtype", DTYPES)
def test_flash_attn_head_dim_v(dtype, nheads, nheads_k, causal, modes, want_lse):
    """q and k at 192, v at 128: O comes out at 128, through the prepared path (no LSE wanted,
    no ALiBi) and the general one."""
    torch.manual_seed(0)
    m = MODE_SETS[modes]
    q = randn((2, 113, nheads, 192), dtype, q_scale(m["softcap"]))
    k = randn((2, 203, nheads_k, 192), dtype)
    v = randn((2, 203, nheads_k, 128), dtype)
    kw = dict(causal=causal, window_size=m["window_size"], softcap=m["softcap"],
              alibi_slopes=make_alibi(m["alibi"], 2, nheads))
    for _ in range(2):  # the second call of a key takes the prepared plan
        res = flash_attn_func(q, k, v, **kw, return_softmax_lse=want_lse)
        out, lse = res if want_lse else (res, None)
        assert out.shape == (2, 113, nheads, 128) and out.dtype == dtype
        check_attention(out, lse, partial(attention_ref, q, k, v, **kw))


@parametrize("modes", list(MODE_SETS))
@parametrize("causal", [False, True])
@parametrize("dtype", DTYPES)
def test_flash_attn_varlen_head_dim_v(dtype, causal, modes):
    """Packed sequences (one with no query, one whose queries see no key) at (192, 128)."""
    check_varlen(dtype, 192, 113, 203, 6, 2, causal, **MODE_SETS[modes], dv=128)


def test_flash_attn_head_dim_v_backward_refused():
    """No backward kernel takes a V head dim of its own: refused when backward runs."""
    torch.manual_seed(0)
    q, k = (randn((1, 64, 2, 192), torch.bfloat16, requires_grad=True) for _ in range(2))
    v = randn((1, 64, 2, 128), torch.bfloat16, requires_grad=True)
    out = flash_attn_func(q, k, v, causal=True)
    assert out.shape == (1, 64, 2, 128)
    with pytest.raises(NotImplementedError):
        out.float().sum().backward()


# ---- varlen ----


def varlen_problem(max_seqlen_q, max_seqlen_k, nheads, api, causal, window_size, softcap,
                   alibi):
    """The varlen checks' five sequences (seeded): lens_q, lens_k, cu_q, cu_k, total_q, total_k
    and the modes' keyword arguments. Sequence 1 has no query, sequence 2's queries see no key
    (qkvpacked: the same lengths for both)."""
    torch.manual_seed(0)
    batch = 5
    lens_q = random_lengths(batch, max_seqlen_q, zero_at=1)  # a sequence with no query
    if api == "qkvpacked":
        lens_k = lens_q
    else:
        lens_k = random_lengths(batch, max_seqlen_k, zero_at=2)  # queries that see no key
    cu_q, cu_k = cu_seqlens(lens_q), cu_seqlens(lens_k)
    modes = dict(causal=causal, window_size=window_size, softcap=softcap,
                 alibi_slopes=make_alibi(alibi, batch, nheads))
    return lens_q, lens_k, cu_q, cu_k, sum(lens_q), sum(lens_k), modes


def check_varlen(dtype, d, max_seqlen_q, max_seqlen_k, nheads, nheads_k, causal, window_size,
                 softcap, alibi, api="separate", dv=None):
    lens_q, lens_k, cu_q, cu_k, total_q, total_k, modes = varlen_problem(
        max_seqlen_q, max_seqlen_k, nheads, api, causal, window_size, softcap, alibi)
    if api == "qkvpacked":
        qkv = randn((total_q, 3, nheads, d), dtype)
        qkv[:, 0] *= q_scale(softcap)
        q, k, v = qkv.unbind(1)
        out, lse = flash_attn_varlen_qkvpacked_func(qkv, cu_q, max(lens_q), **modes,
                                                    return_softmax_lse=True)
    elif api == "kvpacked":
        q = randn((total_q, nheads, d), dtype, q_scale(softcap))
        kv = randn((total_k, 2, nheads_k, d), dtype)
        k, v = kv.unbind(1)
        out, lse = flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, max(lens_q), max(lens_k),
                                                   **modes, return_softmax_lse=True)
    else:
        q = randn((total_q, nheads, d), dtype, q_scale(softcap))
        k = randn((total_k, nheads_k, d), dtype)
        v = randn((total_k, nheads_k, dv or d), dtype)
        out, lse = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), **modes,
                                          return_softmax_lse=True)
    assert lse.shape == (nheads, total_q) and out.shape == (total_q, nheads, v.shape[-1])
    ks, vs = torch.split(k, lens_k), torch.split(v, lens_k)
    check_attention(out, lse, partial(varlen_ref, q, lens_q, ks, vs, **modes))


VARLEN_SHAPES = [(113, 203, 6, 2), (512, 256, 6, 1)]


@every_mode
@parametrize("max_seqlen_q,max_seqlen_k,nheads,nheads_k", VARLEN_SHAPES)
@parametrize("d", [64, 128])
@parametrize("dtype", DTYPES)
def test_flash_attn_varlen_output(max_seqlen_q, max_seqlen_k, nheads, nheads_k, d, dtype, causal,
                                  window_size, softcap, alibi):
    check_varlen(dtype, d, max_seqlen_q, max_seqlen_k, nheads, nheads_k, causal, window_size,
                 softcap, alibi)


@parametrize("causal", [False, True])
@parametrize("max_seqlen_q,max_seqlen_k", [(1, 239), (256, 300)])
@parametrize("nheads,nheads_k", GQA)
@parametrize("d", HEAD_DIMS)
@parametrize("dtype", DTYPES)
def test_flash_attn_varlen_head_dims(max_seqlen_q, max_seqlen_k, nheads, nheads_k, d, dtype,
                                     causal):
    check_varlen(dtype, d, max_seqlen_q, max_seqlen_k, nheads, nheads_k, causal, **NO_MODES)


def packed_varlen_test(check):
    """A test of ``check`` (:func:`check_varlen` or :func:`check_varlen_grad`) through the packed
    forms: qkvpacked (MHA) and kvpacked (GQA 6:2) at d 128, causal or not, plain or every mode."""

    @parametrize("modes", list(MODE_SETS))
    @parametrize("causal", [False, True])
    @parametrize("api", ["qkvpacked", "kvpacked"])
    @parametrize("dtype", DTYPES)
    def test(api, dtype, causal, modes):
        nheads_k = 6 if api == "qkvpacked" else 2
        check(dtype, 128, 217, 300, 6, nheads_k, causal, **MODE_SETS[modes], api=api)

    return test


test_flash_attn_varlen_packed = packed_varlen_test(check_varlen)


def check_varlen_grad(dtype, d, max_seqlen_q, max_seqlen_k, nheads, nheads_k, causal,
                      window_size, softcap, alibi, api="separate"):
    """flash_attn_varlen_func's backward (or a packed form's) over five sequences of different
    lengths, one with no query and one whose queries see no key: out and softmax_lse, then every
    gradient (NaN-poisoned first) against the per-sequence float32 reference's autograd, by the
    rule. A refusal fails the test."""
    lens_q, lens_k, cu_q, cu_k, total_q, total_k, modes = varlen_problem(
        max_seqlen_q, max_seqlen_k, nheads, api, causal, window_size, softcap, alibi)

    def ref_of(q, k, v, upcast):
        ks, vs = torch.split(k, lens_k), torch.split(v, lens_k)
        return varlen_ref(q, lens_q, ks, vs, **modes, upcast=upcast)

    if api == "qkvpacked":
        qkv = randn((total_q, 3, nheads, d), dtype)
        qkv[:, 0] *= q_scale(softcap)
        qkv.requires_grad_()
        out, lse = flash_attn_varlen_qkvpacked_func(qkv, cu_q, max(lens_q), **modes,
                                                    return_softmax_lse=True)
        leaves, names = (qkv,), ("dqkv",)
        ref_fn = lambda x, upcast: ref_of(*x.unbind(1), upcast)[0]  # noqa: E731
        check_attention(out, lse, partial(ref_of, *qkv.unbind(1)))
    elif api == "kvpacked":
        q = randn((total_q, nheads, d), dtype, q_scale(softcap), requires_grad=True)
        kv = randn((total_k, 2, nheads_k, d), dtype, requires_grad=True)
        out, lse = flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, max(lens_q), max(lens_k),
                                                   **modes, return_softmax_lse=True)
        leaves, names = (q, kv), ("dq", "dkv")
        ref_fn = lambda q, kv, upcast: ref_of(q, *kv.unbind(1), upcast)[0]  # noqa: E731
        check_attention(out, lse, partial(ref_of, q, *kv.unbind(1)))
    else:
        q = randn((total_q, nheads, d), dtype, q_scale(softcap), requires_grad=True)
        k = randn((total_k, nheads_k, d), dtype, requires_grad=True)
        v = randn((total_k, nheads_k, d), dtype, requires_grad=True)
        out, lse = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), **modes,
                                          return_softmax_lse=True)
        leaves, names = (q, k, v), ("dq", "dk", "dv")
        ref_fn = lambda q, k, v, upcast: ref_of(q, k, v, upcast)[0]  # noqa: E731
        check_attention(out, lse, partial(ref_of, q, k, v))
    assert lse.shape == (nheads, total_q)
    check_grads(names, ref_fn, leaves, out, randn(out.shape, dtype), skip_unsupported=False)


VARLEN_GRAD_MODES = {
    "plain": NO_MODES,
    "window": dict(window_size=(64, 16), softcap=0.0, alibi=None),
    "softcap": dict(window_size=(-1, -1), softcap=30.0, alibi=None),
    "alibi_head": dict(window_size=(-1, -1), softcap=0.0, alibi="head"),
    "alibi_batch_head": dict(window_size=(-1, -1), softcap=0.0, alibi="batch_head"),
    "all_modes": ALL_MODES,
}


@parametrize("modes", list(VARLEN_GRAD_MODES))
@parametrize("causal", [False, True])
@parametrize("nheads,nheads_k", GQA)
@parametrize("max_seqlen_q,max_seqlen_k", [(113, 203), (512, 256)])
@parametrize("d", [64, 128])
@parametrize("dtype", DTYPES)
def test_flash_attn_varlen_grad(max_seqlen_q, max_seqlen_k, nheads, nheads_k, d, dtype, causal,
                                modes):
    check_varlen_grad(dtype, d, max_seqlen_q, max_seqlen_k, nheads, nheads_k, causal,
                      **VARLEN_GRAD_MODES[modes])


test_flash_attn_varlen_packed_grad = packed_varlen_test(check_varlen_grad)


def check_paged_varlen(dtype, d, page_block_size, nheads, nheads_k, causal, window_size, softcap,
                       alibi, fill=None):
    """flash_attn_varlen_func on paged K/V: sequence b's keys are its first
    cu_seqlens_k[b+1] - cu_seqlens_k[b] rows behind block_table[b] (the rest random, or ``fill``)."""
    torch.manual_seed(0)
    batch, max_seqlen_q, max_seqlen_k = 4, 150, 333
    lens_q = random_lengths(batch, max_seqlen_q, zero_at=1)
    lens_k = random_lengths(batch, max_seqlen_k, zero_at=2)
    capacity = math.ceil(max_seqlen_k / page_block_size) * page_block_size
    k_logical = randn((batch, capacity, nheads_k, d), dtype)
    v_logical = randn((batch, capacity, nheads_k, d), dtype)
    if fill is not None:
        for b, n in enumerate(lens_k):
            k_logical[b, n:] = fill
            v_logical[b, n:] = fill
    k_pool, v_pool, table = paged(k_logical, v_logical, page_block_size, fill=fill)
    q = randn((sum(lens_q), nheads, d), dtype, q_scale(softcap))
    modes = dict(causal=causal, window_size=window_size, softcap=softcap,
                 alibi_slopes=make_alibi(alibi, batch, nheads))
    out, lse = flash_attn_varlen_func(q, k_pool, v_pool, cu_seqlens(lens_q), cu_seqlens(lens_k),
                                      max(lens_q), max(lens_k), block_table=table, **modes,
                                      return_softmax_lse=True)
    ks = [k_logical[b, :n] for b, n in enumerate(lens_k)]
    vs = [v_logical[b, :n] for b, n in enumerate(lens_k)]
    check_attention(out, lse, partial(varlen_ref, q, lens_q, ks, vs, **modes))


@parametrize("modes", list(MODE_SETS))
@parametrize("causal", [False, True])
@parametrize("nheads,nheads_k", [(6, 6), (6, 2)])
@parametrize("page_block_size", [16, 64, 256])
@parametrize("dtype", DTYPES)
def test_flash_attn_varlen_paged(page_block_size, nheads, nheads_k, dtype, causal, modes):
    check_paged_varlen(dtype, 128, page_block_size, nheads, nheads_k, causal, **MODE_SETS[modes])


@parametrize("d", HEAD_DIMS)
@parametrize("dtype", DTYPES)
def test_flash_attn_varlen_paged_head_dims(d, dtype):
    check_paged_varlen(dtype, d, 64, 6, 2, True, **NO_MODES)


# ---- flash_attn_with_kvcache ----


def check_kvcache(dtype, *, batch=3, nheads=6, nheads_k=2, d=128, capacity=512, seqlen_q=1,
                  append=True, page_block_size=None, seqlens_as="tensor", lens=None,
                  causal=True, window_size=(-1, -1), softcap=0.0, alibi=None, fill=None):
    """One flash_attn_with_kvcache call against the reference, and the caches afterwards: the
    appended rows written at cache_seqlens[b] (through the block table when paged), every other
    row (spare blocks included) unchanged, bit for bit."""
    torch.manual_seed(0)
    seqlen_new = seqlen_q if append else 0
    if lens is None:
        if seqlens_as == "int":
            lens = [capacity * 3 // 5] * batch
        else:  # an empty cache, a full one, the rest random
            lens = torch.randint(0, capacity - seqlen_new + 1, (batch,)).tolist()
            lens[0], lens[-1] = 0, capacity - seqlen_new
    k_logical = randn((batch, capacity, nheads_k, d), dtype)
    v_logical = randn((batch, capacity, nheads_k, d), dtype)
    if fill is not None:
        for b, n in enumerate(lens):
            k_logical[b, n:] = fill
            v_logical[b, n:] = fill
    table = None
    if page_block_size is None:
        k_cache, v_cache = k_logical.clone(), v_logical.clone()
    else:
        k_cache, v_cache, table = paged(k_logical, v_logical, page_block_size, fill=fill)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    q = randn((batch, seqlen_q, nheads, d), dtype, q_scale(softcap))
    k_new = randn((batch, seqlen_new, nheads_k, d), dtype) if append else None
    v_new = randn((batch, seqlen_new, nheads_k, d), dtype) if append else None
    cache_seqlens = lens[0] if seqlens_as == "int" else torch.tensor(
        lens, dtype=torch.int32, device=DEVICE)
    modes = dict(causal=causal, window_size=window_size, softcap=softcap,
                 alibi_slopes=make_alibi(alibi, batch, nheads))
    out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
                                       cache_seqlens=cache_seqlens, block_table=table, **modes,
                                       return_softmax_lse=True)

    k_after, v_after = k_logical.clone(), v_logical.clone()
    if append:
        for b, n in enumerate(lens):
            k_after[b, n:n + seqlen_new] = k_new[b]
            v_after[b, n:n + seqlen_new] = v_new[b]
    for name, cache, before, after in (("k_cache", k_cache, k_before, k_after),
                                       ("v_cache", v_cache, v_before, v_after)):
        expected = after
        if table is not None:
            expected = before.clone()
            expected[table.flatten().long()] = after.reshape(-1, *before.shape[1:])
        assert_bitwise_equal(name, cache, expected)

    seqlens_k = [n + seqlen_new for n in lens]
    check_attention(out, lse, partial(attention_ref, q, k_after, v_after, seqlens_k=seqlens_k,
                                      **modes))


@parametrize("causal", [False, True])
@parametrize("seqlen_q", [1, 5, 67])
@parametrize("append", [False, True])
@parametrize("seqlens_as", ["int", "tensor"])
@parametrize("page_block_size", [None, 16, 64, 256])
@parametrize("dtype", DTYPES)
def test_flash_attn_kvcache(seqlen_q, page_block_size, seqlens_as, append, dtype, causal):
    check_kvcache(dtype, seqlen_q=seqlen_q, append=append, page_block_size=page_block_size,
                  seqlens_as=seqlens_as, causal=causal)


@parametrize("alibi", ALIBI)
@parametrize("softcap", SOFTCAPS)
@parametrize("window_size", WINDOWS)
@parametrize("seqlen_q", [1, 5])
@parametrize("page_block_size", [None, 64])
@parametrize("dtype", DTYPES)
def test_flash_attn_kvcache_modes(seqlen_q, page_block_size, dtype, window_size, softcap, alibi):
    check_kvcache(dtype, seqlen_q=seqlen_q, page_block_size=page_block_size, causal=False,
                  window_size=window_size, softcap=softcap, alibi=alibi)


@parametrize("page_block_size", [None, 64])
@parametrize("nheads,nheads_k", GQA)
@parametrize("d", HEAD_DIMS)
@parametrize("dtype", DTYPES)
def test_flash_attn_kvcache_decode_head_dims(d, nheads, nheads_k, page_block_size, dtype):
    """Decode (one query row, one appended row) over a long cache: the split-KV kernels. The
    second sequence fills the cache."""
    check_kvcache(dtype, batch=2, nheads=nheads, nheads_k=nheads_k, d=d, capacity=4096,
                  page_block_size=page_block_size, lens=[1731, 4095])


@parametrize("storage,seqlen_q", [("kvcache", 1), ("kvcache", 37), ("kvcache_paged", 1),
                                  ("kvcache_paged", 37), ("varlen_paged", None)])
def test_nan_past_seqlens_is_never_read(storage, seqlen_q):
    """docs/MODES.md: rows past len_k(b) (slots past cache_seqlens, unused pages) are never
    read, so NaN there cannot reach the output."""
    nan, dtype = float("nan"), torch.bfloat16
    if storage == "varlen_paged":
        check_paged_varlen(dtype, 128, 64, 6, 2, True, **NO_MODES, fill=nan)
    else:
        check_kvcache(dtype, seqlen_q=seqlen_q, causal=True, fill=nan,
                      page_block_size=64 if storage == "kvcache_paged" else None)


# ---- errors ----


def _dense(dtype=torch.float16, batch=2, seqlen=64, nheads=4, nheads_k=4, d=64):
    return (randn((batch, seqlen, nheads, d), dtype), randn((batch, seqlen, nheads_k, d), dtype),
            randn((batch, seqlen, nheads_k, d), dtype))


def test_wrong_dtype_raises():
    q, k, v = _dense()
    with pytest.raises(ValueError):
        flash_attn_func(q.float(), k.float(), v.float())
    with pytest.raises(ValueError):
        flash_attn_func(q, k.to(torch.bfloat16), v)
    with pytest.raises(ValueError):
        flash_attn_func(q, k, v.to(torch.bfloat16))


def test_head_dim_not_contiguous_raises():
    q, k, v = _dense()
    q_strided = randn((2, 64, 4, 128), torch.float16)[..., ::2]
    assert q_strided.shape == q.shape and q_strided.stride(-1) == 2
    with pytest.raises(ValueError):
        flash_attn_func(q_strided, k, v)
    v_strided = randn((2, 64, 64, 4), torch.float16).transpose(2, 3)
    assert v_strided.shape == v.shape and v_strided.stride(-1) == 4
    with pytest.raises(ValueError):
        flash_attn_func(q, k, v_strided)


def test_unimplemented_options_raise():
    q, k, v = _dense()
    with pytest.raises(NotImplementedError):
        flash_attn_func(q, k, v, dropout_p=0.1)
    with pytest.raises(NotImplementedError):
        flash_attn_func(q, k, v, return_attn_probs=True)
    cu = cu_seqlens([64, 64])
    packed = [t.flatten(0, 1) for t in (q, k, v)]
    with pytest.raises(NotImplementedError):
        flash_attn_varlen_func(*packed, cu, cu, 64, 64, dropout_p=0.1)
    with pytest.raises(NotImplementedError):
        flash_attn_varlen_func(*packed, cu, cu, 64, 64, return_attn_probs=True)


@parametrize("api", ["dense", "kvpacked", "varlen", "kvcache"])
def test_gqa_heads_not_divisible_raise(api):
    q, k, v = _dense(nheads=6, nheads_k=4)
    with pytest.raises(ValueError):
        if api == "dense":
            flash_attn_func(q, k, v)
        elif api == "kvpacked":
            flash_attn_kvpacked_func(q, torch.stack((k, v), dim=2))
        elif api == "varlen":
            cu = cu_seqlens([64, 64])
            flash_attn_varlen_func(*(t.flatten(0, 1) for t in (q, k, v)), cu, cu, 64, 64)
        else:
            flash_attn_with_kvcache(q[:, :1], k, v, cache_seqlens=32)


@parametrize("bad", ["decreasing", "nonzero_start", "past_total"])
@parametrize("which", ["q", "k"])
def test_varlen_bad_cu_seqlens_raise(which, bad):
    torch.manual_seed(0)
    lens = [40, 0, 70, 30]
    total = sum(lens)
    q, k, v = (randn((total, 4, 64), torch.float16) for _ in range(3))
    good = [0, *itertools.accumulate(lens)]
    broken = {
        "decreasing": [0, 40, 30, 110, 140],
        "nonzero_start": [5, 40, 40, 110, 140],
        "past_total": [0, 40, 40, 110, total + 16],
    }[bad]
    cu_q = torch.tensor(broken if which == "q" else good, dtype=torch.int32, device=DEVICE)
    cu_k = torch.tensor(broken if which == "k" else good, dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError):
        flash_attn_varlen_func(q, k, v, cu_q, cu_k, 80, 80)
    torch.cuda.synchronize()


@parametrize("append", [False, True])
@parametrize("page_block_size", [None, 64])
def test_kvcache_seqlens_over_capacity_raise(page_block_size, append):
    """cache_seqlens (+ the appended rows) past the capacity: refused, nothing appended."""
    torch.manual_seed(0)
    batch, capacity, nheads, d = 2, 256, 4, 64
    k_cache, v_cache = (randn((batch, capacity, nheads, d), torch.float16) for _ in range(2))
    table = None
    if page_block_size is not None:
        k_cache, v_cache, table = paged(k_cache, v_cache, page_block_size)
    before = k_cache.clone()
    q = randn((batch, 1, nheads, d), torch.float16)
    new = dict(k=randn((batch, 1, nheads, d), torch.float16),
               v=randn((batch, 1, nheads, d), torch.float16)) if append else {}
    over = capacity if append else capacity + 1
    seqlens = torch.tensor([10, over], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError):
        flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, block_table=table,
                                **new)
    assert_bitwise_equal("k_cache", k_cache, before)


@parametrize("entry", ["negative", "num_blocks"])
@parametrize("api", ["varlen", "kvcache"])
def test_block_table_out_of_range_raises(api, entry):
    torch.manual_seed(0)
    batch, nheads, d, block_size = 2, 4, 64, 16
    logical = [randn((batch, 64, nheads, d), torch.float16) for _ in range(2)]
    k_pool, v_pool, table = paged(*logical, block_size)
    table[0, 0] = -1 if entry == "negative" else k_pool.shape[0]
    before = k_pool.clone()
    q = randn((batch, 1, nheads, d), torch.float16)
    with pytest.raises(ValueError):
        if api == "varlen":
            cu = cu_seqlens([1] * batch)
            flash_attn_varlen_func(q.flatten(0, 1), k_pool, v_pool, cu, cu_seqlens([50, 60]), 1,
                                   60, block_table=table)
        else:
            flash_attn_with_kvcache(q, k_pool, v_pool, k=randn((batch, 1, nheads, d), q.dtype),
                                    v=randn((batch, 1, nheads, d), q.dtype), cache_seqlens=20,
                                    block_table=table)
    assert_bitwise_equal("k_cache", k_pool, before)


# ---- torch.compile ----


class AttentionBlock(torch.nn.Module):
    """Projections, attention (``attn(q, k, v)``), output projection."""

    def __init__(self, dim, nheads, nheads_k, head_dim, attn):
        super().__init__()
        self.nheads, self.nheads_k, self.head_dim, self.attn = nheads, nheads_k, head_dim, attn
        self.wq = torch.nn.Linear(dim, nheads * head_dim)
        self.wkv = torch.nn.Linear(dim, 2 * nheads_k * head_dim)
        self.wo = torch.nn.Linear(nheads * head_dim, dim)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.nheads, self.head_dim)
        k, v = self.wkv(x).view(b, s, 2, self.nheads_k, self.head_dim).unbind(2)
        return self.wo(self.attn(q, k, v).reshape(b, s, -1))


@parametrize("dtype", DTYPES)
def test_torch_compile(dtype):
    """torch.compile(fullgraph=True) traces through flashcore's ops: same output as eager by the
    rule, and a backward."""
    torch.manual_seed(0)
    flash = AttentionBlock(256, 8, 2, 64, partial(flash_attn_func, causal=True))
    flash = flash.to(DEVICE, dtype)
    ref = copy.deepcopy(flash).float()
    ref.attn = lambda q, k, v: attention_ref(q, k, v, causal=True, upcast=True)[0]
    ref_lp = copy.deepcopy(flash)
    ref_lp.attn = lambda q, k, v: attention_ref(q, k, v, causal=True, upcast=False)[0]
    compiled = torch.compile(flash, fullgraph=True)

    x = randn((2, 177, 256), dtype)
    dout = randn((2, 177, 256), dtype)

    def run(model, module, x, dout):
        """model(x) and the gradients of x and of module's parameters (model's own or, for the
        compiled one, those of the module it wraps)."""
        x = x.detach().requires_grad_()
        out = model(x)
        names, params = zip(*module.named_parameters())
        grads = torch.autograd.grad(out, [x, *params], dout)
        return out.detach(), dict(zip(["x", *names], grads))

    out_ref, grads_ref = run(ref, ref, x.float(), dout.float())
    out_lp, grads_lp = run(ref_lp, ref_lp, x, dout)
    for model in (compiled, flash):
        out, grads = run(model, flash, x, dout)
        assert_close("out", out, out_ref, out_lp)
        for name, g in grads.items():
            assert_close(f"d{name}", g, grads_ref[name], grads_lp[name])


# ---- CUDA graphs ----


def capture(fn):
    """torch's documented pattern: warm up on a side stream, then capture ``fn()``."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fn()
    return graph, static_out


@parametrize("causal", [False, True])
@parametrize("dtype", DTYPES)
def test_cuda_graph_prefill(dtype, causal):
    torch.manual_seed(0)
    q = randn((2, 384, 8, 128), dtype)
    k, v = randn((2, 512, 2, 128), dtype), randn((2, 512, 2, 128), dtype)
    fn = partial(flash_attn_func, q, k, v, causal=causal, return_softmax_lse=True)
    graph, (out, lse) = capture(fn)
    for t in (q, k, v):
        t.copy_(torch.randn_like(t))
    graph.replay()
    out_eager, lse_eager = fn()
    torch.cuda.synchronize()
    check_attention(out, lse, partial(attention_ref, q, k, v, causal=causal))
    assert_bitwise_equal("out", out, out_eager)
    assert_bitwise_equal("softmax_lse", lse, lse_eager)


def _decode_problem(dtype, page_block_size, batch=2, nheads=16, nheads_k=2):
    """Decode over a long cache with few sequences (split-KV), with a one-row append. Returns
    the call (on static inputs), its static inputs, the caches' logical contents and a check of
    an output against the reference and of the caches after the append."""
    d, capacity = 128, 8192
    k_logical = randn((batch, capacity, nheads_k, d), dtype)
    v_logical = randn((batch, capacity, nheads_k, d), dtype)
    table = None
    if page_block_size is None:
        k_cache, v_cache = k_logical, v_logical
    else:
        k_cache, v_cache, table = paged(k_logical, v_logical, page_block_size)
    static = dict(
        q=randn((batch, 1, nheads, d), dtype),
        k=randn((batch, 1, nheads_k, d), dtype),
        v=randn((batch, 1, nheads_k, d), dtype),
        cache_seqlens=torch.tensor([5000, 7321, 1234, 6000][:batch], dtype=torch.int32,
                                   device=DEVICE),
    )
    fn = partial(flash_attn_with_kvcache, k_cache=k_cache, v_cache=v_cache, block_table=table,
                 causal=True, return_softmax_lse=True, **static)

    def logical():
        if table is None:
            return k_cache.clone(), v_cache.clone()
        return tuple(c[table.long()].flatten(1, 2) for c in (k_cache, v_cache))

    def check(out, lse, k_before, v_before):
        """Against the reference on the caches before the call plus the append."""
        k_ref, v_ref = k_before.clone(), v_before.clone()
        lens = static["cache_seqlens"].tolist()
        for b, n in enumerate(lens):
            k_ref[b, n] = static["k"][b, 0]
            v_ref[b, n] = static["v"][b, 0]
        check_attention(out, lse, partial(attention_ref, static["q"], k_ref, v_ref, causal=True,
                                          seqlens_k=[n + 1 for n in lens]))
        k_now, v_now = logical()
        assert_bitwise_equal("k_cache", k_now, k_ref)
        assert_bitwise_equal("v_cache", v_now, v_ref)

    return fn, static, logical, check


@parametrize("page_block_size", [None, 64])
@parametrize("dtype", DTYPES)
def test_cuda_graph_decode(dtype, page_block_size):
    """A decode step with an append, captured once and replayed on new inputs and new
    cache_seqlens: each replay matches an eager call on the same inputs bit for bit."""
    torch.manual_seed(0)
    fn, static, logical, check = _decode_problem(dtype, page_block_size)
    graph, (out, lse) = capture(fn)
    for step in range(2):
        for name in ("q", "k", "v"):
            static[name].copy_(torch.randn_like(static[name]))
        static["cache_seqlens"].add_(step + 1)
        k_before, v_before = logical()
        graph.replay()
        torch.cuda.synchronize()
        check(out, lse, k_before, v_before)
        out_graph, lse_graph = out.clone(), lse.clone()
        graph.replay()  # again: the workspace's counters are zeroed inside the graph
        assert_bitwise_equal("out (second replay)", out, out_graph)
        out_eager, lse_eager = fn()  # rewrites the same rows, reads the same cache
        torch.cuda.synchronize()
        assert_bitwise_equal("out", out_graph, out_eager)
        assert_bitwise_equal("softmax_lse", lse_graph, lse_eager)
        check(out_eager, lse_eager, k_before, v_before)


@parametrize("dtype", DTYPES)
def test_cuda_graph_fresh_stream(dtype):
    """A capture on a stream where flashcore never ran (no workspace of its own): the workspace
    comes from the graph's pool."""
    torch.manual_seed(0)
    fn, static, logical, check = _decode_problem(dtype, None)
    k_before, v_before = logical()
    out_eager, lse_eager = fn()  # on the current stream: builds the kernels
    torch.cuda.synchronize()
    check(out_eager, lse_eager, k_before, v_before)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out, lse = fn()
    graph.replay()
    torch.cuda.synchronize()
    assert_bitwise_equal("out", out, out_eager)
    assert_bitwise_equal("softmax_lse", lse, lse_eager)


@parametrize("dtype", DTYPES)
def test_cuda_graph_several_calls(dtype):
    """Several calls in one capture share the capture's workspace (allocated and zeroed at its
    first call, grown by a later call that needs more): two decode layers of different sizes
    over their own caches and a prefill, each bit-identical to an eager call."""
    torch.manual_seed(0)
    layers = [_decode_problem(dtype, None), _decode_problem(dtype, 64, batch=3, nheads_k=1)]
    q = randn((2, 300, 8, 128), dtype)
    k, v = randn((2, 300, 2, 128), dtype), randn((2, 300, 2, 128), dtype)
    prefill = partial(flash_attn_func, q, k, v, causal=True, return_softmax_lse=True)

    def step():
        return [fn() for fn, *_ in layers] + [prefill()]

    graph, outs = capture(step)
    for _, static, _, _ in layers:
        for name in ("q", "k", "v"):
            static[name].copy_(torch.randn_like(static[name]))
    q.copy_(torch.randn_like(q))
    before = [logical() for _, _, logical, _ in layers]
    graph.replay()
    torch.cuda.synchronize()
    for (_, _, _, check), (out, lse), caches in zip(layers, outs, before):
        check(out, lse, *caches)
    check_attention(outs[-1][0], outs[-1][1], partial(attention_ref, q, k, v, causal=True))
    for i, ((out, lse), (out_eager, lse_eager)) in enumerate(zip(outs, step())):
        assert_bitwise_equal(f"out of call {i}", out, out_eager)
        assert_bitwise_equal(f"softmax_lse of call {i}", lse, lse_eager)


# ---- fp8 KV caches (FlashAttention 3's float8_e4m3fn K/V with k_descale / v_descale) ----

E4M3 = torch.float8_e4m3fn
# k_descale / v_descale as FlashAttention 3 takes them, (batch, nheads_k); (nheads_k,); one
# element; a (batch, nheads_k) view expanded from one element, as serving engines pass a
# per-tensor scale (strides 0); and none (FlashAttention 3's 1.0).
DESCALES = ["batch_head", "head", "tensor", "expanded", "none"]


def e4m3(shape):
    """Random stored e4m3 values (unscaled), as FlashAttention 3's tests make them."""
    return torch.randn(shape, device=DEVICE).to(E4M3)


def make_descale(kind, batch, nheads_k):
    """Factors in [0.25, 1.75): rows of randn divided by them stay far below e4m3's 448, where
    torch's conversion (NaN) and the append's (saturating) would part."""
    if kind == "none":
        return None
    shape = {"batch_head": (batch, nheads_k), "head": (nheads_k,)}.get(kind, (1,))
    d = torch.rand(shape, device=DEVICE, dtype=torch.float32) * 1.5 + 0.25
    return d.expand(batch, nheads_k) if kind == "expanded" else d


def descale_table(descale, batch, nheads_k):
    """Any descale as its (batch, nheads_k) float32 factors."""
    if descale is None:
        return torch.ones((batch, nheads_k), device=DEVICE)
    return descale.expand(batch, nheads_k).float()


def dequantize(cache, table):
    """An e4m3 cache ``(batch, rows, nheads_k, d)`` as its true values: ``float(byte) *
    descale[b, h_k]``, in float32."""
    return cache.float() * table[:, None, :, None]


def quantize(rows, table_b):
    """Rows ``(n, nheads_k, d)`` of one sequence as the append stores them: ``rows / descale`` in
    float32, rounded to nearest even into e4m3. The kernel computes the same thing (an IEEE
    division, __fdiv_rn, then cvt.rn.satfinite), and torch's division by a CUDA tensor is an IEEE
    division too (no reciprocal) and its conversion rounds to nearest even: with no value near
    448 (where only saturation differs) the bytes must agree exactly, ties included."""
    return (rows.float() / table_b[None, :, None]).to(E4M3)


def assert_bytes_equal(name, actual, expected):
    assert actual.shape == expected.shape and actual.dtype == expected.dtype == E4M3, name
    same = actual.view(torch.uint8) == expected.view(torch.uint8)
    assert bool(same.all()), f"{name}: {int((~same).sum())} of {same.numel()} bytes differ"


def dequantized_ref(q, k_true, v_true, dtype, **modes):
    """:func:`attention_ref` on the dequantized K/V: float32 with ``upcast``, else rounded to
    the input dtype (the rule's yardstick)."""

    def ref(*, upcast):
        k, v = (k_true, v_true) if upcast else (k_true.to(dtype), v_true.to(dtype))
        return attention_ref(q, k, v, upcast=upcast, **modes)

    return ref


def check_kvcache_fp8(dtype, *, batch=3, nheads=6, nheads_k=2, d=128, capacity=512, seqlen_q=1,
                      append=True, page_block_size=None, descale="batch_head", lens=None,
                      causal=True, window_size=(-1, -1), softcap=0.0, alibi=None):
    """One flash_attn_with_kvcache call on e4m3 caches against the reference on the dequantized
    caches, and the caches afterwards: the appended rows quantized with their descales
    (:func:`quantize`) at cache_seqlens[b], every other byte (spare blocks included) unchanged."""
    torch.manual_seed(0)
    seqlen_new = seqlen_q if append else 0
    if lens is None:  # an empty cache, a full one, the rest random
        lens = torch.randint(0, capacity - seqlen_new + 1, (batch,)).tolist()
        lens[0], lens[-1] = 0, capacity - seqlen_new
    k_logical = e4m3((batch, capacity, nheads_k, d))
    v_logical = e4m3((batch, capacity, nheads_k, d))
    table = None
    if page_block_size is None:
        k_cache, v_cache = k_logical.clone(), v_logical.clone()
    else:
        k_cache, v_cache, table = paged(k_logical, v_logical, page_block_size)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    q = randn((batch, seqlen_q, nheads, d), dtype, q_scale(softcap))
    k_new = randn((batch, seqlen_new, nheads_k, d), dtype) if append else None
    v_new = randn((batch, seqlen_new, nheads_k, d), dtype) if append else None
    k_descale = make_descale(descale, batch, nheads_k)
    v_descale = make_descale(descale, batch, nheads_k)
    modes = dict(causal=causal, window_size=window_size, softcap=softcap,
                 alibi_slopes=make_alibi(alibi, batch, nheads))
    out, lse = flash_attn_with_kvcache(
        q, k_cache, v_cache, k=k_new, v=v_new,
        cache_seqlens=torch.tensor(lens, dtype=torch.int32, device=DEVICE), block_table=table,
        k_descale=k_descale, v_descale=v_descale, **modes, return_softmax_lse=True,
    )
    assert out.dtype == dtype and out.shape == q.shape

    k_table = descale_table(k_descale, batch, nheads_k)
    v_table = descale_table(v_descale, batch, nheads_k)
    k_after, v_after = k_logical.clone(), v_logical.clone()
    if append:
        for b, n in enumerate(lens):
            k_after.view(torch.uint8)[b, n:n + seqlen_new] = (
                quantize(k_new[b], k_table[b]).view(torch.uint8))
            v_after.view(torch.uint8)[b, n:n + seqlen_new] = (
                quantize(v_new[b], v_table[b]).view(torch.uint8))
    for name, cache, before, after in (("k_cache", k_cache, k_before, k_after),
                                       ("v_cache", v_cache, v_before, v_after)):
        expected = after
        if table is not None:
            expected = before.clone()
            expected.view(torch.uint8)[table.flatten().long()] = (
                after.view(torch.uint8).reshape(-1, *before.shape[1:]))
        assert_bytes_equal(name, cache, expected)

    seqlens_k = [n + seqlen_new for n in lens]
    check_attention(out, lse, dequantized_ref(
        q, dequantize(k_after, k_table), dequantize(v_after, v_table), dtype,
        seqlens_k=seqlens_k, **modes))


@parametrize("seqlen_q", [1, 4])
@parametrize("append", [False, True])
@parametrize("page_block_size", [None, 64])
@parametrize("dtype", DTYPES)
def test_flash_attn_kvcache_fp8(dtype, page_block_size, append, seqlen_q):
    check_kvcache_fp8(dtype, seqlen_q=seqlen_q, append=append, page_block_size=page_block_size)


@parametrize("descale", DESCALES)
def test_flash_attn_kvcache_fp8_descales(descale):
    """Every descale layout (and none), appended and read through a paged cache."""
    check_kvcache_fp8(torch.bfloat16, descale=descale, page_block_size=16)


@parametrize("nheads,nheads_k", GQA)
@parametrize("d", [64, 128, 256])
def test_flash_attn_kvcache_fp8_decode_head_dims(d, nheads, nheads_k):
    """Decode over a long cache (split KV), not causal, every head dim of the fp8 kernel; the
    second sequence fills the cache."""
    check_kvcache_fp8(torch.bfloat16, batch=2, nheads=nheads, nheads_k=nheads_k, d=d,
                      capacity=2048, lens=[1731, 2047], causal=False)


@parametrize("page_block_size", [None, 64])
def test_flash_attn_kvcache_fp8_modes(page_block_size):
    """A window, softcap and ALiBi over an fp8 cache."""
    check_kvcache_fp8(torch.float16, seqlen_q=3, page_block_size=page_block_size, causal=False,
                      **ALL_MODES)


@parametrize("causal", [False, True])
@parametrize("api", ["dense", "varlen", "varlen_paged"])
def test_flash_attn_fp8_kv(api, causal):
    """flash_attn_func and flash_attn_varlen_func (packed and paged) on fp8 K/V."""
    torch.manual_seed(0)
    dtype, nheads, nheads_k, d = torch.bfloat16, 6, 2, 128
    if api == "dense":
        batch = 2
        q = randn((batch, 113, nheads, d), dtype)
        k, v = e4m3((batch, 203, nheads_k, d)), e4m3((batch, 203, nheads_k, d))
        k_descale = make_descale("batch_head", batch, nheads_k)
        v_descale = make_descale("batch_head", batch, nheads_k)
        out, lse = flash_attn_func(q, k, v, causal=causal, k_descale=k_descale,
                                   v_descale=v_descale, return_softmax_lse=True)
        check_attention(out, lse, dequantized_ref(
            q, dequantize(k, k_descale), dequantize(v, v_descale), dtype, causal=causal))
        return
    batch = 4
    lens_q = random_lengths(batch, 40, zero_at=1)
    lens_k = random_lengths(batch, 300, zero_at=2)
    q = randn((sum(lens_q), nheads, d), dtype)
    k_descale = make_descale("head", batch, nheads_k)
    v_descale = make_descale("head", batch, nheads_k)
    k_table = descale_table(k_descale, batch, nheads_k)
    v_table = descale_table(v_descale, batch, nheads_k)
    if api == "varlen":
        k, v = e4m3((sum(lens_k), nheads_k, d)), e4m3((sum(lens_k), nheads_k, d))
        ks, vs = torch.split(k, lens_k), torch.split(v, lens_k)
        table = None
    else:
        k_logical, v_logical = (e4m3((batch, 320, nheads_k, d)) for _ in range(2))
        k, v, table = paged(k_logical, v_logical, 64)
        ks = [k_logical[b, :n] for b, n in enumerate(lens_k)]
        vs = [v_logical[b, :n] for b, n in enumerate(lens_k)]
    out, lse = flash_attn_varlen_func(q, k, v, cu_seqlens(lens_q), cu_seqlens(lens_k),
                                      max(lens_q), max(lens_k), causal=causal, block_table=table,
                                      k_descale=k_descale, v_descale=v_descale,
                                      return_softmax_lse=True)
    k_true = [kb.float() * k_table[b][None, :, None] for b, kb in enumerate(ks)]
    v_true = [vb.float() * v_table[b][None, :, None] for b, vb in enumerate(vs)]

    def ref(*, upcast):
        kk = k_true if upcast else [t.to(dtype) for t in k_true]
        vv = v_true if upcast else [t.to(dtype) for t in v_true]
        return varlen_ref(q, lens_q, kk, vv, causal=causal, upcast=upcast)

    check_attention(out, lse, ref)


def test_fp8_kv_declined_by_the_prepared_path():
    """flash_attn_func's prepared path keys 16-bit K/V only: an fp8 K/V without descales (1.0)
    goes to the general path every call, and is right each time."""
    torch.manual_seed(0)
    from flashcore import _ops

    _ops.forget_prepared()
    q = randn((1, 64, 4, 64), torch.float16)
    k, v = e4m3((1, 96, 2, 64)), e4m3((1, 96, 2, 64))
    assert _ops.fwd_fast(q, k, v, None, True, (-1, -1), 0.0) is None
    assert not any(_ops._prepared.values())
    ones = torch.ones((1, 2), device=DEVICE)
    ref = dequantized_ref(q, dequantize(k, ones), dequantize(v, ones), torch.float16,
                          causal=True)
    for _ in range(2):
        check_attention(flash_attn_func(q, k, v, causal=True), None, ref)
    assert not any(_ops._prepared.values())


def test_fp8_kv_backward_refused():
    """An fp8 K/V has no backward: refused when backward runs."""
    torch.manual_seed(0)
    q = randn((1, 64, 4, 64), torch.bfloat16, requires_grad=True)
    k, v = e4m3((1, 64, 2, 64)), e4m3((1, 64, 2, 64))
    out = flash_attn_func(q, k, v, causal=True, k_descale=make_descale("head", 1, 2),
                          v_descale=make_descale("head", 1, 2))
    assert torch.isfinite(out).all()
    with pytest.raises(NotImplementedError, match="fp8"):
        out.float().sum().backward()


@parametrize("bad", [0.0, -1.0, float("nan")])
def test_fp8_bad_descale_raises(bad):
    """A factor that is not finite and > 0 would flip, erase or poison the cache's values:
    refused by the table checks, before anything is appended."""
    torch.manual_seed(0)
    q = randn((2, 1, 4, 64), torch.bfloat16)
    k_cache, v_cache = e4m3((2, 64, 2, 64)), e4m3((2, 64, 2, 64))
    before = k_cache.clone()
    k_descale = make_descale("batch_head", 2, 2)
    k_descale[1, 1] = bad
    with pytest.raises(ValueError, match="k_descale: entry 3"):
        flash_attn_with_kvcache(q, k_cache, v_cache, k=randn((2, 1, 2, 64), torch.bfloat16),
                                v=randn((2, 1, 2, 64), torch.bfloat16), cache_seqlens=10,
                                k_descale=k_descale,
                                v_descale=make_descale("batch_head", 2, 2))
    assert_bytes_equal("k_cache", k_cache, before)


def test_fp8_descale_on_the_host_raises():
    q = randn((2, 1, 4, 64), torch.bfloat16)
    cache = e4m3((2, 64, 2, 64))
    with pytest.raises(ValueError, match="k_descale must be a CUDA tensor"):
        flash_attn_with_kvcache(q, cache, cache, cache_seqlens=10,
                                k_descale=torch.ones(2, 2), v_descale=torch.ones(2, 2))


def test_cuda_graph_decode_fp8():
    """An fp8 decode step with an append and no descales (the ones flashcore makes for them are
    made inside the capture), replayed on new inputs: bit-identical to an eager call."""
    torch.manual_seed(0)
    batch, nheads, nheads_k, d, capacity = 2, 16, 2, 128, 4096
    k_cache, v_cache = (e4m3((batch, capacity, nheads_k, d)) for _ in range(2))
    static = dict(q=randn((batch, 1, nheads, d), torch.bfloat16),
                  k=randn((batch, 1, nheads_k, d), torch.bfloat16),
                  v=randn((batch, 1, nheads_k, d), torch.bfloat16),
                  cache_seqlens=torch.tensor([3000, 1234], dtype=torch.int32, device=DEVICE))
    fn = partial(flash_attn_with_kvcache, k_cache=k_cache, v_cache=v_cache, causal=True,
                 return_softmax_lse=True, **static)
    graph, (out, lse) = capture(fn)
    for name in ("q", "k", "v"):
        static[name].copy_(torch.randn_like(static[name]))
    k_before, v_before = k_cache.clone(), v_cache.clone()
    graph.replay()
    torch.cuda.synchronize()
    ones = torch.ones((batch, nheads_k), device=DEVICE)
    k_after, v_after = k_before.clone(), v_before.clone()
    for b, n in enumerate(static["cache_seqlens"].tolist()):
        k_after.view(torch.uint8)[b, n] = quantize(static["k"][b], ones[b]).view(torch.uint8)[0]
        v_after.view(torch.uint8)[b, n] = quantize(static["v"][b], ones[b]).view(torch.uint8)[0]
    assert_bytes_equal("k_cache", k_cache, k_after)
    assert_bytes_equal("v_cache", v_cache, v_after)
    seqlens_k = [n + 1 for n in static["cache_seqlens"].tolist()]
    check_attention(out, lse, dequantized_ref(
        static["q"], dequantize(k_after, ones), dequantize(v_after, ones), torch.bfloat16,
        causal=True, seqlens_k=seqlens_k))
    out_eager, lse_eager = fn()
    torch.cuda.synchronize()
    assert_bitwise_equal("out", out, out_eager)
    assert_bitwise_equal("softmax_lse", lse, lse_eager)


# ---- the fp8 forward (FlashAttention 3's: float8_e4m3fn q, k and v with q/k/v descales) ----

# The kernel that takes it is the Hopper one (sm_90a, head dim 128); elsewhere every call is
# NotImplementedError (test_fp8_forward_needs_hopper).
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
requires_hopper = pytest.mark.skipif(
    not HOPPER, reason="the fp8 forward (e4m3 q, k and v) is taken by the Hopper kernel: sm_90a"
)
# The three descales of one layout, as FlashAttention 3 takes them: (batch, nheads_k); (nheads_k,);
# one element; a (batch, nheads_k) view expanded from one factor per KV head (strides (0, 1));
# none (1.0).
FP8_FWD_DESCALES = ["batch_head", "head", "tensor", "expanded", "none"]
FP8_FWD_SHAPES = [(113, 203), (300, 300), (512, 256)]  # the last: causal rows that see no key


def pow2_descale(kind, batch, nheads_k):
    """Factors 0.5, 1 or 2: powers of two, so that dequantizing is exact in float32, and small
    enough that the scores (std up to 4) stay in a range where the fp8 program's own rounding is
    what the bar below measures."""
    if kind == "none":
        return None
    shape = {"batch_head": (batch, nheads_k), "head": (nheads_k,),
             "expanded": (nheads_k,)}.get(kind, (1,))
    d = torch.exp2(torch.randint(-1, 2, shape, device=DEVICE).float())
    return d.expand(batch, nheads_k) if kind == "expanded" else d


def fp8_forward_ref(q, k, v, q_descale, k_descale, v_descale, causal, softmax_scale=None):
    """The float32 reference on the dequantized values: each e4m3 value times the factor of its
    (sequence, KV head), a query head reading its KV head's ``q_descale`` entry (the (batch,
    nheads_k) table repeated over each group of nheads / nheads_k query heads)."""
    batch, nheads, nheads_k = q.shape[0], q.shape[2], k.shape[2]
    q_table, k_table, v_table = (descale_table(d, batch, nheads_k)
                                 for d in (q_descale, k_descale, v_descale))
    q_true = dequantize(q, q_table.repeat_interleave(nheads // nheads_k, dim=1))
    with torch.no_grad():
        return attention_ref(q_true, dequantize(k, k_table), dequantize(v, v_table),
                             causal=causal, softmax_scale=softmax_scale)


def assert_fp8_close(out, lse, ref_out, ref_lse):
    """The bar of flashcore-candle's fp8 GPU test (crates/candle/tests/gpu.rs,
    ``flash_attn_fp8_against_dequantized_reference``), not the oracle's fp8 rule (docs/ORACLE.md):
    max|O - ref| <= 0.05 · max|ref| + 0.01. The oracle's rule needs a low-precision reference of
    the fp8 program itself (scores as an fp8 GEMM returning bf16 gives them, the numerators of
    P rounded to e4m3), which is ``cargo xtask verify --dtype e4m3``'s, the kernel's accuracy
    gate; this test checks the binding's plumbing (dtypes, descale layouts and which factor
    scales which head, GQA, O's dtype and the LSE), as the candle test does for flashcore-candle:
    Q, K and V are the reference's own values, but the kernel rounds P to e4m3 before P·V (3
    mantissa bits), its e4m3 Q·Kᵀ is not summed in float32 (Hopper's fp8 tensor cores) and O is
    bfloat16. A factor applied to the wrong head or sequence moves O by far more. The LSE (which
    the candle op does not return) carries the scores' error, about bf16's rounding of them
    (2^-8 relative, docs/ORACLE.md): max|LSE - ref| <= 0.01 · max|ref| + 0.02 over the rows
    that see a key; the others must be +inf, with O = 0. ``lse`` None: O only."""
    assert out.dtype == torch.bfloat16 and out.shape == ref_out.shape
    out = out.float()
    assert bool(torch.isfinite(out).all()), "O has non-finite elements (unwritten?)"
    peak = ref_out.abs().max().item()
    err = (out - ref_out).abs().max().item()
    assert err <= 0.05 * peak + 0.01, f"max |O - ref| = {err:.4g} (max |ref| {peak:.4g})"
    empty = torch.isinf(ref_lse)
    if empty.any():
        rows = empty.transpose(1, 2)  # (batch, seqlen_q, nheads), as O's rows
        assert bool((out[rows] == 0).all()), "rows that see no key must give O = 0"
    if lse is None:
        return
    assert lse.dtype == torch.float32 and lse.shape == ref_lse.shape
    assert bool((lse[empty] == ref_lse[empty]).all()), "rows that see no key must give LSE +inf"
    seen = ~empty
    assert bool(torch.isfinite(lse[seen]).all()), "LSE has non-finite elements (unwritten?)"
    if seen.any():
        peak = ref_lse[seen].abs().max().item()
        err = (lse[seen] - ref_lse[seen]).abs().max().item()
        assert err <= 0.01 * peak + 0.02, f"max |LSE - ref| = {err:.4g} (max |ref| {peak:.4g})"


def check_fp8_forward(batch, seqlen_q, seqlen_k, nheads, nheads_k, causal, descale,
                      softmax_scale=None, want_lse=True):
    """One fp8 forward (head dim 128, e4m3 values from randn, descales of layout ``descale``)
    against :func:`fp8_forward_ref` by :func:`assert_fp8_close`."""
    torch.manual_seed(0)
    d = 128
    q = e4m3((batch, seqlen_q, nheads, d))
    k, v = e4m3((batch, seqlen_k, nheads_k, d)), e4m3((batch, seqlen_k, nheads_k, d))
    q_descale, k_descale, v_descale = (pow2_descale(descale, batch, nheads_k) for _ in range(3))
    got = flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal,
                          q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                          return_softmax_lse=want_lse)
    out, lse = got if want_lse else (got, None)
    assert isinstance(out, torch.Tensor)
    ref_out, ref_lse = fp8_forward_ref(q, k, v, q_descale, k_descale, v_descale, causal,
                                       softmax_scale)
    assert_fp8_close(out, lse, ref_out, ref_lse)


@requires_hopper
@parametrize("causal", [False, True])
@parametrize("nheads,nheads_k", GQA)
@parametrize("seqlen_q,seqlen_k", FP8_FWD_SHAPES)
def test_fp8_forward(seqlen_q, seqlen_k, nheads, nheads_k, causal):
    """The fp8 forward against the float32 attention of the dequantized values, MHA/GQA/MQA,
    causal or not, descales per (sequence, KV head) as FlashAttention 3 takes them."""
    check_fp8_forward(2, seqlen_q, seqlen_k, nheads, nheads_k, causal, "batch_head")


@requires_hopper
@parametrize("causal", [False, True])
@parametrize("descale", FP8_FWD_DESCALES)
def test_fp8_forward_descales(descale, causal):
    """Every descale layout the core reads (and none: 1.0), at GQA."""
    check_fp8_forward(2, 113, 203, 6, 2, causal, descale)


@requires_hopper
@parametrize("want_lse", [False, True])
def test_fp8_forward_softmax_scale(want_lse):
    """An explicit softmax_scale; without return_softmax_lse only O comes back (bfloat16)."""
    check_fp8_forward(1, 64, 96, 4, 2, True, "head", softmax_scale=0.05, want_lse=want_lse)


@requires_hopper
def test_fp8_forward_missing_descales_are_one():
    """A missing descale is 1.0 (FlashAttention 3's): only q_descale given equals all three
    given with ones beside it, bit for bit."""
    torch.manual_seed(0)
    q = e4m3((2, 113, 6, 128))
    k, v = e4m3((2, 203, 2, 128)), e4m3((2, 203, 2, 128))
    q_descale = pow2_descale("batch_head", 2, 2)
    ones = torch.ones((2, 2), device=DEVICE)
    out = flash_attn_func(q, k, v, causal=True, q_descale=q_descale)
    full = flash_attn_func(q, k, v, causal=True, q_descale=q_descale, k_descale=ones,
                           v_descale=ones)
    assert_bitwise_equal("out", out, full)


@requires_hopper
@parametrize("table", ["q_descale", "k_descale", "v_descale"])
@parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_fp8_forward_bad_descale_raises(bad, table):
    """A factor that is not finite and > 0 would flip, erase or poison an input: refused by the
    table checks (on by default) before anything launches."""
    torch.manual_seed(0)
    q = e4m3((2, 64, 4, 128))
    k, v = e4m3((2, 64, 2, 128)), e4m3((2, 64, 2, 128))
    descales = {name: pow2_descale("batch_head", 2, 2) for name in
                ("q_descale", "k_descale", "v_descale")}
    descales[table][1, 1] = bad
    with pytest.raises(ValueError, match=f"{table}: entry 3 is"):
        flash_attn_func(q, k, v, causal=True, **descales)


def test_fp8_forward_descale_on_the_host_raises():
    q = e4m3((1, 64, 4, 128))
    kv = e4m3((1, 64, 2, 128))
    with pytest.raises(ValueError, match="q_descale must be a CUDA tensor"):
        flash_attn_func(q, kv, kv, q_descale=torch.ones(1, 2))


@requires_hopper
@pytest.mark.parametrize(
    "mode,reason",
    [
        (dict(d=64), "head_dim 128 only"),
        (dict(d=256), "head_dim 128 only"),
        (dict(window_size=(32, 0)), "dense problems only"),
        (dict(softcap=30.0), "dense problems only"),
        (dict(alibi="head"), "dense problems only"),
    ],
    ids=["d64", "d256", "window", "softcap", "alibi"],
)
def test_fp8_forward_not_implemented(mode, reason):
    """What no kernel takes with an fp8 q is NotImplementedError with the kernels' reasons, the
    Hopper kernel's among them, never a launch."""
    torch.manual_seed(0)
    d = mode.get("d", 128)
    q = e4m3((1, 64, 4, d))
    kv = e4m3((1, 64, 2, d))
    kw = {k: v for k, v in mode.items() if k != "d"}
    if "alibi" in kw:
        kw["alibi_slopes"] = make_alibi(kw.pop("alibi"), 1, 4)
    with pytest.raises(NotImplementedError, match=reason):
        flash_attn_func(q, kv, kv, **kw)


@pytest.mark.skipif(HOPPER, reason="on sm_90a the Hopper kernel takes it (test_fp8_forward)")
def test_fp8_forward_needs_hopper():
    """Off Hopper no kernel takes an fp8 q: NotImplementedError with the kernels' reasons."""
    q = e4m3((1, 64, 4, 128))
    kv = e4m3((1, 64, 2, 128))
    with pytest.raises(NotImplementedError, match="fp8"):
        flash_attn_func(q, kv, kv, causal=True)


@requires_hopper
def test_fp8_forward_backward_refused():
    """The fp8 forward has no backward: refused (NotImplementedError) when backward runs."""
    torch.manual_seed(0)
    q = e4m3((1, 64, 4, 128)).requires_grad_(True)
    kv = e4m3((1, 64, 2, 128))
    out = flash_attn_func(q, kv, kv, causal=True)
    assert out.requires_grad and torch.isfinite(out).all()
    with pytest.raises(NotImplementedError, match=r"fp8 \(float8_e4m3fn\) q, k and v"):
        out.float().sum().backward()


@requires_hopper
def test_fp8_forward_declined_by_the_prepared_path():
    """flash_attn_func's prepared path keys 16-bit Q/K/V only: an fp8 call without descales
    goes to the general path every call, and is right each time."""
    from flashcore import _ops

    _ops.forget_prepared()
    torch.manual_seed(0)
    q = e4m3((1, 64, 4, 128))
    k, v = e4m3((1, 96, 2, 128)), e4m3((1, 96, 2, 128))
    assert _ops.fwd_fast(q, k, v, None, True, (-1, -1), 0.0) is None
    assert not any(_ops._prepared.values())
    ref_out, ref_lse = fp8_forward_ref(q, k, v, None, None, None, True)
    for _ in range(2):
        assert_fp8_close(*flash_attn_func(q, k, v, causal=True, return_softmax_lse=True),
                         ref_out, ref_lse)
    assert not any(_ops._prepared.values())
