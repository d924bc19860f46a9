"""flashcore: FlashAttention-style attention kernels for NVIDIA GPUs, compiled at run time by
NVRTC (or embedded as cubins in the ``aot`` build), with FlashAttention 2's API on PyTorch
tensors::

    from flashcore import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True)

See :mod:`flashcore.flash_attn_interface` for the functions and what they refuse.
"""

from . import _toolkit

_toolkit.configure()

from . import _flashcore, _ops  # noqa: E402
from ._ops import kernels, set_table_checks, table_checks  # noqa: E402
from .flash_attn_interface import (  # noqa: E402
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

__version__ = _flashcore.__version__


def set_batch_invariant(on: bool) -> None:
    """flashcore's batch-invariant mode for every call after it, process-wide: each sequence's
    output is then bit-identical whatever else is in its batch (flashcore's docs/MODES.md)."""
    _flashcore.set_batch_invariant(bool(on))
    _ops.forget_prepared()  # prepared plans were made under the previous setting


def batch_invariant() -> bool:
    return _flashcore.batch_invariant()


def backward_kernels():
    """The backward kernels compiled in, fastest first, as (name, deterministic)."""
    return list(_flashcore.backward_kernels())


__all__ = [
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache",
    "kernels",
    "backward_kernels",
    "set_batch_invariant",
    "batch_invariant",
    "set_table_checks",
    "table_checks",
]
