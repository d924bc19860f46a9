"""flashcore's kernels as PyTorch custom ops (``torch.ops.flashcore.*``).

Each op reads its tensors through their data pointers, dtypes, shapes and strides (no copies),
allocates its outputs with PyTorch's caching allocator, and queues the kernels on PyTorch's
current stream of the tensors' device. Each has a fake (meta) implementation, so
``torch.compile`` traces through it without a graph break, and the dense and varlen (packed)
forwards carry flashcore's backward into autograd (``flashcore::bwd``, ``flashcore::varlen_bwd``:
causal or not, GQA, sliding windows, softcap, ALiBi); what has none (fp8 inputs, paged K/V, a V
head dim of its own, what no backward kernel takes) raises ``NotImplementedError`` from
``backward``.

Eager calls that record no gradient run the CUDA implementation directly (:func:`eager`):
PyTorch's dispatcher costs more than a small attention call on its own. ``flash_attn_func``'s
commonest call (no ALiBi, no LSE wanted) goes further (:func:`fwd_fast`): its checks, plan and
kernel are prepared once per shape, and a call is one launch. Everything else (autograd,
``torch.compile``, fake tensors) goes through the registered ops.

An fp8 KV cache (``torch.float8_e4m3fn`` K/V, FlashAttention 3's) goes to the kernels as its
bytes with float32 ``k_descale``/``v_descale`` tables (:func:`kv_descales` supplies FlashAttention
3's 1.0 for a missing one); Q and O stay float16/bfloat16, and it has no backward. The dense
forward also takes FlashAttention 3's fp8 forward, Q, K and V all e4m3 with ``q_descale`` too
(:func:`qkv_descales`); O is then bfloat16, and it has no backward either. A dense call with
descales checks their values as the varlen and KV-cache calls check their tables
(:func:`set_table_checks`).

The workspace some plans need (split-KV partials, scheduler counters, the backward's D vector)
is PyTorch memory too: one zeroed tensor per (device, stream) in eager mode, one per capture
while a CUDA graph is being captured (it then lives in the graph's pool, and its zeroing is part
of the graph). The core zeroes a plan's counters again when the call before it on the stream
may have written scratch there (`Device::with_lent_workspace`): a forward after a backward.
"""

import math
import os
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _flashcore

_DTYPES = {
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float32: "f32",
    torch.int32: "i32",
    torch.float8_e4m3fn: "e4m3",
}

_E4M3 = torch.float8_e4m3fn

_table_checks = True


def set_table_checks(on: bool) -> None:
    """Whether varlen and KV-cache calls validate their tables (cu_seqlens, cache_seqlens,
    block_table, the fp8 descales) before launching, and dense calls their fp8 descales (each
    finite and > 0). On by default: the kernels trust the tables, so a bad entry would otherwise
    be a wild read (or, for a descale, a silently wrong answer). The check copies the tables to
    the host, a stream synchronisation, so a serving loop that builds its own tables may turn it
    off. It is skipped while a CUDA graph is being captured (where no synchronisation can be
    made)."""
    global _table_checks
    _table_checks = bool(on)


def table_checks() -> bool:
    return _table_checks


def _arg(t: Tensor):
    return (t.data_ptr(), _DTYPES.get(t.dtype, str(t.dtype)), t.shape, t.stride())


def _opt(t: Optional[Tensor]):
    return None if t is None else _arg(t)


def _concrete(*ts) -> bool:
    """Whether every size and stride is a plain int (not a symbolic one of dynamic shapes)."""
    return all(
        all(isinstance(x, int) for x in (*t.shape, *t.stride())) for t in ts if t is not None
    )


def _shape_arg(t: Optional[Tensor]):
    """A tensor as the Rust side's checks see it, without memory (fake and meta tensors)."""
    if t is None:
        return None
    return (0, _DTYPES.get(t.dtype, str(t.dtype)), tuple(t.shape), tuple(t.stride()))


def scale_of(softmax_scale: Optional[float], head_dim: int) -> float:
    """FlashAttention's softmax scale: ``1/sqrt(head_dim)`` unless given."""
    if softmax_scale is None:
        return 1.0 / math.sqrt(head_dim) if head_dim > 0 else 1.0
    return float(softmax_scale)


def window_of(window_size) -> Tuple[int, int]:
    """``window_size`` as the pair (left, right) of ints, or a ValueError."""
    try:
        left, right = window_size
        return int(left), int(right)
    except (TypeError, ValueError):
        raise ValueError(
            f"flashcore: window_size must be a pair (left, right), got {window_size!r}"
        ) from None


def kv_descales(k, k_descale, v_descale):
    """The descales of a call whose K/V may be an fp8 (e4m3) cache, as FlashAttention 3 reads
    them: for e4m3 K, a missing ``k_descale`` or ``v_descale`` is 1.0, here a table of ones
    shaped as the other (which is then made contiguous, so that both index alike) or of one
    element. Anything else is passed on for the Rust checks to judge (descales given with a
    16-bit K/V are refused there)."""
    if not isinstance(k, Tensor) or k.dtype != _E4M3:
        return k_descale, v_descale
    if k_descale is not None and v_descale is not None:
        return k_descale, v_descale
    given = k_descale if k_descale is not None else v_descale
    if given is None:
        ones = torch.ones(1, dtype=torch.float32, device=k.device)
        return ones, ones
    if not isinstance(given, Tensor):
        return k_descale, v_descale  # the caller's type check names it
    given = given.contiguous()
    ones = torch.ones(given.shape, dtype=torch.float32, device=given.device)
    return (given, ones) if k_descale is not None else (ones, given)


def qkv_descales(q, k, q_descale, k_descale, v_descale):
    """The descales of a dense call, as FlashAttention 3 reads them. For an e4m3 q (its fp8
    forward), a missing one of the three is 1.0: a table of ones shaped as a given one (the
    given ones are then made contiguous, so that all three index alike), or of one element when
    none is given. For a 16-bit q, ``q_descale`` is passed on as given (the Rust rules refuse it)
    and K/V's are :func:`kv_descales`'s."""
    if not isinstance(q, Tensor) or q.dtype != _E4M3:
        return (q_descale, *kv_descales(k, k_descale, v_descale))
    given = (q_descale, k_descale, v_descale)
    present = [d for d in given if d is not None]
    if len(present) == 3:
        return given
    if not present:
        ones = torch.ones(1, dtype=torch.float32, device=q.device)
        return ones, ones, ones
    if not all(isinstance(d, Tensor) for d in present):
        return given  # the caller's type check names it
    # On q's device, where the kernel reads them: a given table on another device is then the
    # one the device check names.
    ones = torch.ones(present[0].shape, dtype=torch.float32, device=q.device)
    return tuple(ones if d is None else d.contiguous() for d in given)


def _check_only(fn, args, tensors) -> None:
    """The checks of ``fn`` (device None: nothing launches) on fake tensors' shapes."""
    if _concrete(*tensors):
        fn(*args, (0, 0), None, 0)


# FLASHCORE_POISON_OUTPUTS=1 fills every output with NaN before the kernels run, so a test sees
# any element they leave unwritten (it costs a fill per output: tests only).
_poison = os.environ.get("FLASHCORE_POISON_OUTPUTS") == "1"


def _alloc(shape, dtype, device) -> Tensor:
    if _poison:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


if hasattr(torch._C, "_cuda_getCurrentRawStream"):

    def _stream(index: int) -> int:
        return torch._C._cuda_getCurrentRawStream(index)

else:  # pragma: no cover - older torch

    def _stream(index: int) -> int:
        return torch.cuda.current_stream(index).cuda_stream


if hasattr(torch._C, "_cuda_isCurrentStreamCapturing"):
    _capturing = torch._C._cuda_isCurrentStreamCapturing
else:  # pragma: no cover - older torch
    _capturing = torch.cuda.is_current_stream_capturing

_workspaces = {}
_capture_workspaces = {}


def _grown(cache, key, n: int, dtype, device, zeroed: bool) -> Tensor:
    """``cache[key]``, replaced by a tensor of ``max(n, 1)`` elements when it is missing or
    smaller (zeroed for a workspace, whose counters must start at zero)."""
    t = cache.get(key)
    if t is None or t.numel() < n:
        make = torch.zeros if zeroed else torch.empty
        t = make(max(n, 1), dtype=dtype, device=device)
        cache[key] = t
    return t


def _launch(fn, args, device: torch.device) -> str:
    """Calls ``fn(*args, workspace, device, stream)``, lending it a zeroed workspace and growing
    it when the plan asks for more (nothing runs then); returns the generation that ran.

    Eager calls share one workspace per (device, stream); the core zeroes a plan's counters when
    the call before it may have left scratch there.
    While a CUDA graph is being captured, each capture gets its own, allocated (and zeroed, a
    memset the graph replays) at its first call and shared by the capture's later calls, so the
    memory belongs to that graph's pool."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    stream = _stream(index)
    if _capturing():
        cache, key = _capture_workspaces, (index, stream, _flashcore.capture_id(index, stream))
    else:
        if _capture_workspaces:
            _capture_workspaces.clear()  # captures end before eager calls resume
        cache, key = _workspaces, (index, stream)
    ws = cache.get(key)
    try:
        lent = (0, 0) if ws is None else (ws.data_ptr(), ws.numel())
        name, need = fn(*args, lent, index, stream)
        if need:
            ws = _grown(cache, key, need, torch.float32, device, zeroed=True)
            name, need = fn(*args, (ws.data_ptr(), ws.numel()), index, stream)
            if need:  # pragma: no cover - a plan that grows between two identical calls
                raise RuntimeError(f"flashcore: the workspace of {need} words was refused")
    except BaseException:
        # A failed call may leave the counters set: the next one starts from a zeroed buffer.
        cache.pop(key, None)
        raise
    return name


def _o_shape(q: Tensor, v: Tensor):
    """O's shape: q's with v's head dim last (FlashAttention 3's ``headdim_v``)."""
    return (*q.shape[:-1], v.shape[-1])


def _o_dtype(q: Tensor) -> torch.dtype:
    """O's dtype: q's, or bfloat16 for an fp8 q (FlashAttention 3's fp8 forward)."""
    return torch.bfloat16 if q.dtype == _E4M3 else q.dtype


def _empty_out(q: Tensor, v: Tensor) -> Tensor:
    return _alloc(_o_shape(q, v), _o_dtype(q), q.device)


# ---- dense forward / backward ----


def fwd_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    alibi_slopes: Optional[Tensor],
    deterministic: bool,
    k_descale: Optional[Tensor] = None,
    v_descale: Optional[Tensor] = None,
    q_descale: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    # The op's outputs are always O and a fresh LSE (deterministic matters to the backward only).
    return fwd_eager(q, k, v, softmax_scale, causal, window_left, window_right, softcap,
                     alibi_slopes, want_lse=True, k_descale=k_descale, v_descale=v_descale,
                     q_descale=q_descale)


fwd = torch.library.custom_op("flashcore::fwd", fwd_impl, mutates_args=(), device_types="cuda")

_lse_scratch = {}


def fwd_eager(q, k, v, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes,
              want_lse, k_descale=None, v_descale=None, q_descale=None):
    """:func:`fwd_impl` for the eager fast path (:func:`eager`): when the caller does not want
    the LSE and no graph is being captured, the kernels write it into a scratch buffer kept per
    (device, stream) instead of a fresh tensor (one allocation fewer per call). fp8 descales are
    checked first (:func:`set_table_checks`; not while a graph is being captured)."""
    b, s_q, h = q.shape[0], q.shape[1], q.shape[2]
    out = _empty_out(q, v)
    n = b * h * s_q
    if want_lse or _poison or _capturing():
        lse = _alloc((b, h, s_q), torch.float32, q.device)
        lse_arg = _arg(lse)
    else:
        lse = None
        index = q.device.index
        key = (index, _stream(index))
        scratch = _grown(_lse_scratch, key, n, torch.float32, q.device, zeroed=False)
        lse_arg = (scratch.data_ptr(), "f32", (b, h, s_q), (h * s_q, s_q, 1))
    descales = k_descale is not None or v_descale is not None or q_descale is not None
    args = (
        _arg(q), _arg(k), _arg(v), _arg(out), lse_arg,
        (softmax_scale, causal, (window_left, window_right), softcap), _opt(alibi_slopes),
        _opt(k_descale), _opt(v_descale), _opt(q_descale),
        descales and _table_checks and not _capturing(),
    )
    _launch(_flashcore.forward, args, q.device)
    return out, lse


# Prepared forwards (`_flashcore.prepare_forward`), keyed by everything that decides the plan:
# shapes, strides, dtypes, device and the options as the caller passed them. Bounded: a caller
# whose shapes never repeat (a growing sequence without a KV cache) starts over past the bound.
_prepared = {}
_MAX_PREPARED = 1024
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled


def forget_prepared() -> None:
    """Drops every prepared forward (their plans follow process-wide settings such as the
    batch-invariant mode, so a change of those starts over)."""
    _prepared.clear()


def fwd_fast(q, k, v, softmax_scale, causal, window_size, softcap):
    """``flash_attn_func``'s eager path for calls without ALiBi that do not want the LSE: the
    checks, plan and kernel lookup are done once per key (:func:`_prepare`); a call then costs
    the key, the output's allocation and one launch. Returns the output, or None when the call
    must take the general path (tracing, gradients, a graph capture, an unhashable argument, a
    first call that fails its checks: the general path raises the error with its message)."""
    if type(q) is not Tensor or type(k) is not Tensor or type(v) is not Tensor or _is_compiling():
        return None
    if (q.requires_grad or k.requires_grad or v.requires_grad) and _grad_enabled():
        return None
    try:
        key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(),
               q.dtype, k.dtype, v.dtype, q.is_cuda, k.is_cuda, v.is_cuda,
               q.get_device(), k.get_device(), v.get_device(),
               softmax_scale, causal, window_size, softcap)
        entry = _prepared.get(key)
    except TypeError:  # an unhashable argument, e.g. a list window
        return None
    if entry is None:
        entry = _prepare(key, q, k, v, softmax_scale, causal, window_size, softcap)
    if not entry or _capturing():
        # A capture takes the op's path, which gives each capture its own workspace.
        return None
    prep, index, lse_len, words, o_shape = entry
    stream = _stream(index)
    out = q.new_empty(o_shape)
    if _poison:
        out.fill_(float("nan"))
    skey = (index, stream)
    scratch = _grown(_lse_scratch, skey, lse_len, torch.float32, q.device, zeroed=False)
    lent = (0, 0)
    if words:
        ws = _grown(_workspaces, skey, words, torch.float32, q.device, zeroed=True)
        lent = (ws.data_ptr(), ws.numel())
    try:
        ran = prep.launch(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                          scratch.data_ptr(), lent, stream)
    except BaseException:
        # A failed call may leave the counters set: the next one starts from a zeroed buffer.
        _workspaces.pop(skey, None)
        raise
    return out if ran else None  # False: the generation refused the alignment, nothing ran


def _prepare(key, q, k, v, softmax_scale, causal, window_size, softcap):
    """The prepared forward of ``key`` as (prepared, device index, LSE length, workspace
    words, O's shape), stored; False (stored) for tensors that are not all on one CUDA device, and False
    (not stored) for a call that fails its checks or is taken by no generation."""
    index = q.get_device()
    if not (q.is_cuda and k.is_cuda and v.is_cuda and index == k.get_device() == v.get_device()):
        _prepared[key] = False
        return False
    if q.dtype == _E4M3 or k.dtype != q.dtype or v.dtype != q.dtype:
        # An fp8 (e4m3) Q or K/V, or a mismatch the general path names: never prepared.
        _prepared[key] = False
        return False
    try:
        options = (scale_of(softmax_scale, q.shape[-1]), bool(causal), window_of(window_size),
                   float(softcap))
        prep = _flashcore.prepare_forward(_shape_arg(q), _shape_arg(k), _shape_arg(v), options,
                                          index)
    except Exception:
        return False
    if len(_prepared) >= _MAX_PREPARED:
        _prepared.clear()
    entry = (prep, index, prep.lse_len, prep.workspace_words, _o_shape(q, v))
    _prepared[key] = entry
    return entry


@fwd.register_fake
def _(q, k, v, softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, deterministic,
      k_descale=None, v_descale=None, q_descale=None):
    b, s_q, h = q.shape[0], q.shape[1], q.shape[2]
    out = torch.empty(_o_shape(q, v), dtype=_o_dtype(q), device=q.device)
    lse = q.new_empty((b, h, s_q), dtype=torch.float32)
    args = (
        _shape_arg(q), _shape_arg(k), _shape_arg(v), _shape_arg(out), _shape_arg(lse),
        (softmax_scale, causal, (window_left, window_right), softcap), _shape_arg(alibi_slopes),
        _shape_arg(k_descale), _shape_arg(v_descale), _shape_arg(q_descale), False,
    )
    _check_only(_flashcore.forward, args,
                (q, k, v, alibi_slopes, k_descale, v_descale, q_descale))
    return out, lse


@torch.library.custom_op("flashcore::bwd", mutates_args=(), device_types="cuda")
def bwd(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    alibi_slopes: Optional[Tensor],
    deterministic: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    return _bwd_launch(dout, q, k, v, out, lse,
                       (softmax_scale, causal, (window_left, window_right), softcap),
                       alibi_slopes, deterministic)


@bwd.register_fake
def _(dout, q, k, v, out, lse, softmax_scale, causal, window_left, window_right, softcap,
      alibi_slopes, deterministic):
    return _bwd_fake(dout, q, k, v, out, lse,
                     (softmax_scale, causal, (window_left, window_right), softcap),
                     alibi_slopes, deterministic)


def _bwd_launch(dout, q, k, v, out, lse, mode, alibi_slopes, deterministic, varlen=None):
    """The dense and varlen backward ops' body: ``_flashcore.backward`` into fresh dQ, dK, dV.
    ``mode`` is (scale, causal, (window left, right), softcap); ``varlen`` is None (dense) or
    (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)."""
    # The kernels write dQ, dK, dV with the strides of Q, K, V and read dO with O's (dense).
    q, k, v, dout = q.contiguous(), k.contiguous(), v.contiguous(), dout.contiguous()
    dq, dk, dv = (_alloc(t.shape, t.dtype, t.device) for t in (q, k, v))
    if varlen is None:
        packed = (None, None, 0, 0, False)
    else:
        cu_q, cu_k, max_q, max_k = varlen
        packed = (_arg(cu_q), _arg(cu_k), max_q, max_k, _table_checks and not _capturing())
    args = (
        _arg(dout), _arg(q), _arg(k), _arg(v), _arg(out), _arg(lse),
        _arg(dq), _arg(dk), _arg(dv), mode, _opt(alibi_slopes), deterministic, *packed,
    )
    _launch(_flashcore.backward, args, q.device)
    return dq, dk, dv


def _bwd_fake(dout, q, k, v, out, lse, mode, alibi_slopes, deterministic, varlen=None):
    """:func:`_bwd_launch` on fake tensors: the gradients' shapes, after the backward's checks.
    What no backward takes is refused when the backward runs, not when it is traced
    (torch.compile traces the backward of every call whose inputs require grad)."""
    q, k, v, dout = q.contiguous(), k.contiguous(), v.contiguous(), dout.contiguous()
    grads = tuple(torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    if varlen is None:
        tables, packed = (), (None, None, 0, 0, False)
    else:
        cu_q, cu_k, max_q, max_k = varlen
        tables, packed = (cu_q, cu_k), (_shape_arg(cu_q), _shape_arg(cu_k), max_q, max_k, False)
    args = (
        *(_shape_arg(t) for t in (dout, q, k, v, out, lse, *grads)),
        mode, _shape_arg(alibi_slopes), deterministic, *packed,
    )
    try:
        _check_only(_flashcore.backward, args, (dout, q, k, v, out, lse, *tables, alibi_slopes))
    except NotImplementedError:
        pass
    return grads


def _fwd_setup(ctx, inputs, output):
    q, k, v, scale, causal, wl, wr, softcap, alibi, deterministic = inputs[:10]
    ctx.inputs = len(inputs)
    out, lse = output
    # softmax_lse is an output, not a differentiable one: no gradient flows through it (rather
    # than a wrong one).
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse, alibi)
    ctx.options = (scale, causal, wl, wr, softcap, deterministic)


def _fwd_backward(ctx, dout, dlse):
    q, k, v, out, lse, alibi = ctx.saved_tensors
    none = (None,) * (ctx.inputs - 3)
    if q.dtype == _E4M3:
        # FlashAttention 3's fp8 forward: inference only, as the fp8 K/V below.
        return (refuse_backward(dout, "flash_attn_func with fp8 (float8_e4m3fn) q, k and v"),
                None, None, *none)
    if k.dtype != q.dtype or v.dtype != q.dtype:
        # An fp8 (e4m3) K/V: refused when the backward runs, as the other modes without one.
        return (refuse_backward(dout, "flash_attn_func with an fp8 (float8_e4m3fn) K/V"),
                None, None, *none)
    scale, causal, wl, wr, softcap, deterministic = ctx.options
    dq, dk, dv = bwd(dout, q, k, v, out, lse, scale, causal, wl, wr, softcap, alibi, deterministic)
    return (dq, dk, dv, *none)


fwd.register_autograd(_fwd_backward, setup_context=_fwd_setup)


# ---- varlen (packed, or paged with a block table) ----


def varlen_fwd_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Optional[Tensor],
    seqused_k: Optional[Tensor],
    block_table: Optional[Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    alibi_slopes: Optional[Tensor],
    k_descale: Optional[Tensor] = None,
    v_descale: Optional[Tensor] = None,
    deterministic: bool = False,
) -> Tuple[Tensor, Tensor]:
    # deterministic matters to the backward only.
    total_q, h = q.shape[0], q.shape[1]
    out = _empty_out(q, v)
    lse = _alloc((h, total_q), torch.float32, q.device)
    check = _table_checks and not _capturing()
    args = (
        _arg(q), _arg(k), _arg(v), _arg(out), _arg(lse),
        _arg(cu_seqlens_q), _opt(cu_seqlens_k), _opt(seqused_k), _opt(block_table),
        max_seqlen_q, max_seqlen_k,
        (softmax_scale, causal, (window_left, window_right), softcap), _opt(alibi_slopes),
        _opt(k_descale), _opt(v_descale), check,
    )
    _launch(_flashcore.varlen_forward, args, q.device)
    return out, lse


varlen_fwd = torch.library.custom_op(
    "flashcore::varlen_fwd", varlen_fwd_impl, mutates_args=(), device_types="cuda"
)


@varlen_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, max_seqlen_q, max_seqlen_k,
      softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, k_descale=None,
      v_descale=None, deterministic=False):
    out = torch.empty(_o_shape(q, v), dtype=_o_dtype(q), device=q.device)
    lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    tables = (cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, alibi_slopes, k_descale,
              v_descale)
    args = (
        _shape_arg(q), _shape_arg(k), _shape_arg(v), _shape_arg(out), _shape_arg(lse),
        *(_shape_arg(t) for t in tables[:4]), max_seqlen_q, max_seqlen_k,
        (softmax_scale, causal, (window_left, window_right), softcap), _shape_arg(alibi_slopes),
        _shape_arg(k_descale), _shape_arg(v_descale), False,
    )
    _check_only(_flashcore.varlen_forward, args, (q, k, v, *tables))
    return out, lse


@torch.library.custom_op("flashcore::refuse_backward", mutates_args=(), device_types="cuda")
def refuse_backward(q: Tensor, what: str) -> Tensor:
    raise NotImplementedError(
        f"flashcore: {what} has no backward; the backward pass takes float16/bfloat16 dense or "
        "varlen (packed) attention, causal or not, GQA, with sliding windows, softcap and ALiBi"
    )


@refuse_backward.register_fake
def _(q, what):
    return torch.empty_like(q)


@torch.library.custom_op("flashcore::varlen_bwd", mutates_args=(), device_types="cuda")
def varlen_bwd(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    alibi_slopes: Optional[Tensor],
    deterministic: bool,
) -> Tuple[Tensor, Tensor, Tensor]:
    """FlashAttention 2's ``_flash_attn_varlen_backward``: dQ ``(total_q, h, d)``, dK, dV
    ``(total_k, h_k, d)`` of packed sequences, from the forward's LSE ``(h, total_q)``."""
    return _bwd_launch(dout, q, k, v, out, lse,
                       (softmax_scale, causal, (window_left, window_right), softcap),
                       alibi_slopes, deterministic,
                       (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k))


@varlen_bwd.register_fake
def _(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
      softmax_scale, causal, window_left, window_right, softcap, alibi_slopes, deterministic):
    return _bwd_fake(dout, q, k, v, out, lse,
                     (softmax_scale, causal, (window_left, window_right), softcap),
                     alibi_slopes, deterministic,
                     (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k))


def _varlen_setup(ctx, inputs, output):
    (q, k, v, cu_q, cu_k, used, table, max_q, max_k, scale, causal, wl, wr, softcap,
     alibi, k_descale, v_descale, deterministic) = inputs
    ctx.inputs = len(inputs)
    out, lse = output
    ctx.mark_non_differentiable(lse)
    # A paged K/V (block_table, read through seqused_k) or an fp8 one has no backward.
    ctx.refused = (
        "flash_attn_varlen_func with a paged K/V (block_table)" if table is not None
        else "flash_attn_varlen_func with an fp8 (float8_e4m3fn) K/V"
        if k.dtype != q.dtype or v.dtype != q.dtype else None
    )
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, alibi)
    ctx.options = (max_q, max_k, scale, causal, wl, wr, softcap, deterministic)


def _varlen_backward(ctx, dout, dlse):
    q, k, v, out, lse, cu_q, cu_k, alibi = ctx.saved_tensors
    none = (None,) * (ctx.inputs - 3)
    if ctx.refused is not None:
        return (refuse_backward(dout, ctx.refused), None, None, *none)
    max_q, max_k, scale, causal, wl, wr, softcap, deterministic = ctx.options
    dq, dk, dv = varlen_bwd(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, scale, causal,
                            wl, wr, softcap, alibi, deterministic)
    return (dq, dk, dv, *none)


varlen_fwd.register_autograd(_varlen_backward, setup_context=_varlen_setup)


# ---- KV cache (contiguous or paged), with an optional in-place append ----


def kvcache_fwd_impl(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    cache_seqlens: Tensor,
    block_table: Optional[Tensor],
    k: Optional[Tensor],
    v: Optional[Tensor],
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    alibi_slopes: Optional[Tensor],
    k_descale: Optional[Tensor] = None,
    v_descale: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    b, s_q, h = q.shape[0], q.shape[1], q.shape[2]
    out = _empty_out(q, v_cache)
    lse = _alloc((b, h, s_q), torch.float32, q.device)
    check = _table_checks and not _capturing()
    args = (
        _arg(q), _arg(k_cache), _arg(v_cache), _arg(out), _arg(lse),
        _arg(cache_seqlens), _opt(block_table), _opt(k), _opt(v),
        (softmax_scale, causal, (window_left, window_right), softcap), _opt(alibi_slopes),
        _opt(k_descale), _opt(v_descale), check,
    )
    _launch(_flashcore.kvcache_forward, args, q.device)
    return out, lse


kvcache_fwd = torch.library.custom_op(
    "flashcore::kvcache_fwd", kvcache_fwd_impl, mutates_args=("k_cache", "v_cache"),
    device_types="cuda",
)


@kvcache_fwd.register_fake
def _(q, k_cache, v_cache, cache_seqlens, block_table, k, v, softmax_scale, causal, window_left,
      window_right, softcap, alibi_slopes, k_descale=None, v_descale=None):
    b, s_q, h = q.shape[0], q.shape[1], q.shape[2]
    out = torch.empty(_o_shape(q, v_cache), dtype=_o_dtype(q), device=q.device)
    lse = q.new_empty((b, h, s_q), dtype=torch.float32)
    args = (
        _shape_arg(q), _shape_arg(k_cache), _shape_arg(v_cache), _shape_arg(out),
        _shape_arg(lse), _shape_arg(cache_seqlens), _shape_arg(block_table), _shape_arg(k),
        _shape_arg(v), (softmax_scale, causal, (window_left, window_right), softcap),
        _shape_arg(alibi_slopes), _shape_arg(k_descale), _shape_arg(v_descale), False,
    )
    tensors = (q, k_cache, v_cache, cache_seqlens, block_table, k, v, alibi_slopes, k_descale,
               v_descale)
    _check_only(_flashcore.kvcache_forward, args, tensors)
    return out, lse


def eager(*tensors) -> bool:
    """Whether a call may skip PyTorch's dispatcher and run the op's CUDA implementation
    directly (the ops' eager overhead is most of a small call's time): plain CUDA tensors on one
    device, no gradient to record, and no tracing (torch.compile, fake or subclass tensors)."""
    if torch.compiler.is_compiling():
        return False
    grad = torch.is_grad_enabled()
    device = None
    for t in tensors:
        if t is None:
            continue
        if type(t) is not Tensor or not t.is_cuda or (grad and t.requires_grad):
            return False
        if device is None:
            device = t.device
        elif t.device != device:
            return False  # the op's path says which tensor is on which device
    return True


def kernels() -> List[str]:
    """The forward generations compiled in, fastest first."""
    return list(_flashcore.kernels())
