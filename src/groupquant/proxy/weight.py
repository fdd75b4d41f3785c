"""WeightQuantProxy: quantizes a layer's weight (``[O, I, ...]``), caching the result in eval."""
from __future__ import annotations

import weakref
from typing import Any, Mapping, Optional, Sequence, Union

import torch

from ..quant_tensor import QuantTensor
from .base import QuantProxy

__all__ = ["WeightQuantProxy"]


class WeightQuantProxy(QuantProxy):
    """Takes ``weight_*`` keywords. The weight's shape sizes learned per-channel / per-group
    scales ([O, 1, ...] / [O, k, 1, ...]); groups run along the input dim 1 and channels along
    dim 0 unless the quantizer sets its own dims.

    Eval cache: in eval mode, when no gradient is wanted for the weight, the quant tensor is kept
    and returned again while the weight is the same tensor with the same version counter (an
    optimizer step, ``load_state_dict`` or any in-place change bumps it) and the quantizer's own
    parameters and buffers are unchanged; ``train()``, a new weight or :meth:`clear_cache` drop it.
    """

    prefix = "weight_"

    def __init__(self, quant: Optional[type], weight_shape: Sequence[int],
                 overrides: Optional[Mapping[str, Any]] = None, context: str = "") -> None:
        super().__init__(quant, overrides, context, (1, 0), weight_shape)
        self._cache: Optional[tuple] = None

    def clear_cache(self) -> None:
        """Forget the cached quantized weight."""
        self._cache = None

    def train(self, mode: bool = True) -> "WeightQuantProxy":
        self._cache = None
        return super().train(mode)

    def __getstate__(self) -> dict:
        """Pickle without the cached quantized weight."""
        state = self.__dict__.copy()
        state["_cache"] = None
        return state

    def _cache_key(self, w: torch.Tensor, own: tuple) -> tuple:
        """What must be unchanged for a cached result to hold: the weight's version, dtype and
        device, inference mode, and the versions of the quantizer's own tensors ``own``."""
        return (w._version, w.dtype, w.device, torch.is_inference_mode_enabled(), tuple(t._version for t in own))

    def _cacheable(self, w: torch.Tensor) -> bool:
        if self.training or self.tensor_quant is None or torch.compiler.is_compiling():
            return False
        return not (torch.is_grad_enabled() and w.requires_grad)

    def forward(self, w: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        if not (isinstance(w, torch.Tensor) and self._cacheable(w)):
            return super().forward(w)
        cache = self._cache
        if cache is not None and cache[0]() is w and cache[1] == self._cache_key(w, cache[3]):
            return cache[2]
        out = super().forward(w)
        own = tuple(self.tensor_quant.parameters()) + tuple(self.tensor_quant.buffers())  # after a first-call init
        self._cache = (weakref.ref(w), self._cache_key(w, own), out, own)
        return out
