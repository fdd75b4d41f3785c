"""The eval-mode cache of a quantized weight, and the exact check that keeps it right.

A weight's version counter misses writes through ``weight.data`` (``weight.data.copy_(w)``,
``weight.data.mul_(2)``: ``.data`` is a new tensor with its own counter), so the cache keeps a
byte copy of the weight it quantized and compares it with the weight, byte for byte, on each
use (``memcmp``: no arithmetic, no allocation). That check is always right (whatever wrote the
weight), costs one read of the weight (far less than quantizing it again) and one weight-sized
copy of memory. It needs a CPU tensor: on other devices a byte comparison would wait for the
device on every call, so the weight is quantized on each call there (no cache).
"""
from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

import torch

__all__ = ["CachedWeight", "same_bytes", "cache_supported"]


def _load_memcmp() -> Optional[Callable[..., int]]:
    """libc's ``memcmp`` through ctypes, or None where it cannot be found."""
    for name in (ctypes.util.find_library("c"), "msvcrt"):
        if not name:
            continue
        try:
            memcmp = ctypes.CDLL(name).memcmp
        except (OSError, AttributeError):
            continue
        memcmp.restype = ctypes.c_int
        memcmp.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
        return memcmp
    return None


_MEMCMP = _load_memcmp()


def cache_supported(w: torch.Tensor) -> bool:
    """Whether ``w``'s quantized form may be cached: a dense, contiguous CPU tensor (see module
    doc; a non-contiguous weight would never match its contiguous copy)."""
    return w.is_cpu and w.layout == torch.strided and not w.is_quantized and w.is_contiguous()


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two contiguous CPU tensors of one dtype and shape hold the same bytes (NaN payloads
    and the sign of zero included, which ``torch.equal`` would not tell apart)."""
    if _MEMCMP is not None:
        return _MEMCMP(a.data_ptr(), b.data_ptr(), a.nbytes) == 0
    as_bytes = (a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    return torch.equal(*as_bytes)


@dataclass(frozen=True, eq=False)
class CachedWeight:
    """One cached result: ``source`` (a contiguous copy of the weight it was computed from) with
    its ``dtype`` and ``shape``, ``inference`` (whether it was computed in inference mode), ``own``
    (the quantizer's own tensors) and their ``versions`` then, ``out`` (what the proxy returns: a
    quant tensor) and ``value`` (its dequantized values, in the weight's shape, what a layer's GEMM
    takes)."""

    source: torch.Tensor
    dtype: torch.dtype
    shape: torch.Size
    inference: bool
    own: Tuple[torch.Tensor, ...]
    versions: Tuple[int, ...]
    out: Any
    value: torch.Tensor

    @staticmethod
    def of(w: torch.Tensor, own: Tuple[torch.Tensor, ...], out: Any, value: torch.Tensor) -> "CachedWeight":
        """The entry for ``out`` / ``value`` computed from ``w`` now (a copy of ``w`` is taken)."""
        source = w.detach().clone(memory_format=torch.contiguous_format)
        return CachedWeight(source, source.dtype, source.shape, torch.is_inference_mode_enabled(), own,
                            tuple(t._version for t in own), out, value)

    def holds_for(self, w: torch.Tensor) -> bool:
        """Whether this result is the quantization of ``w`` as it is now (``w`` a CPU tensor, or
        any tensor: other devices never match, their results are not cached)."""
        if not w.is_cpu or w.dtype != self.dtype or w.shape != self.shape or not w.is_contiguous():
            return False
        if torch.is_inference_mode_enabled() != self.inference:
            return False
        if self.own and tuple(t._version for t in self.own) != self.versions:
            return False
        if _MEMCMP is not None:  # (same_bytes, inlined: this runs on every eval call)
            return _MEMCMP(w.data_ptr(), self.source.data_ptr(), w.nbytes) == 0
        return same_bytes(w, self.source)
