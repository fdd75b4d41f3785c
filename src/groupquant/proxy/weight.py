"""WeightQuantProxy: quantizes a layer's weight (``[O, I, ...]``), caching the result in eval."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Tuple, Union

import torch

from ..core import LearnedScale, stat_sync
from ..core.sharded_param import is_sharded
from ..quant_tensor import QuantTensor, plain
from .base import QuantProxy
from .weight_cache import CachedWeight, cache_supported

__all__ = ["WeightQuantProxy"]

_PLAIN = (torch.Tensor, torch.nn.Parameter)


class WeightQuantProxy(QuantProxy):
    """Takes ``weight_*`` keywords. The weight's shape sizes learned per-channel / per-group
    scales ([O, 1, ...] / [O, k, 1, ...]); groups run along the input dim 1 and channels along
    dim 0 unless the quantizer sets its own dims.

    Eval cache: in eval mode, when no gradient is wanted for the weight and the weight is a CPU
    tensor, the quant tensor is kept and returned again while the weight holds the same bytes
    (checked byte for byte on each call, so any change counts: an optimizer step,
    ``load_state_dict``, in-place ops, writes through ``weight.data``), with the same dtype and
    shape, and the quantizer's own parameters and buffers are unchanged; ``train()`` or
    :meth:`clear_cache` drop it. The cache holds a copy of the weight beside its quantized values
    (see :mod:`groupquant.proxy.weight_cache`); on other devices the weight is quantized on each call.
    Under sharding (a ``DTensor`` weight, or FSDP2's gathered copy of one) there is no cache: it
    would hold a full copy of every layer's weight on every rank, undoing the sharding; FSDP2
    frees each gathered weight after its layer, so at most one layer's full weight is held.
    """

    prefix = "weight_"

    def __init__(self, quant: Optional[type], weight_shape: Sequence[int],
                 overrides: Optional[Mapping[str, Any]] = None, context: str = "") -> None:
        super().__init__(quant, overrides, context, (1, 0), weight_shape)
        self._cache: Optional[CachedWeight] = None
        self._sharded = False  # (set once a sharded weight was seen: FSDP2, no cache)

    def learned_scales(self) -> Tuple[LearnedScale, ...]:
        """The quantizer's learned scales (none for statistics-based quantizers)."""
        tensor_quant = self._modules.get("tensor_quant")
        return () if tensor_quant is None else tuple(m for m in tensor_quant.modules() if isinstance(m, LearnedScale))

    @torch.no_grad()
    def init_learned_scales(self, w: torch.Tensor) -> None:
        """Set the learned scales (if any) from weight ``w`` now, as a first call on ``w`` would
        (this rank's statistics, not reduced across ranks: a weight is the same on every rank).
        Layers call it when they are built and given a weight, so that the initialisation does
        not wait for a first forward (which FSDP2 runs on a gathered copy it does not keep). A
        weight on the meta device is skipped (the first call initialises it then)."""
        learned = self.learned_scales()
        if not learned or not isinstance(w, torch.Tensor) or w.is_meta:
            return
        for scale in learned:
            scale.forget()
        with stat_sync(False):
            self.tensor_quant(w.detach())
        self._cache = None

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

    def _cache_for(self, w: Any) -> Optional[CachedWeight]:
        """The cache entry for ``w`` in eval (computed when the one kept does not hold for it), or
        None where the weight is quantized on each call: training, float, a weight that wants a
        gradient, a tensor the cache does not serve (:func:`cache_supported`), compiling."""
        if self.training or not isinstance(w, torch.Tensor) or (w.requires_grad and torch.is_grad_enabled()):
            return None
        if type(w) not in _PLAIN:  # a tensor subclass (the MX all-gather's weights): its bytes are not its own
            return None
        if torch.compiler.is_compiling():
            return None
        tensor_quant = self._modules.get("tensor_quant")  # (a quantizer switched off keeps no cache)
        if tensor_quant is None:
            return None
        cache = self._cache
        if cache is not None and cache.holds_for(w):
            return cache
        if not cache_supported(w) or getattr(self, "_sharded", False):  # (older pickles lack it)
            return None
        if is_sharded(w):  # FSDP2: a cache would keep every layer's full weight on every rank
            self._sharded = True
            return None
        out = super().forward(w)
        own = tuple(tensor_quant.parameters()) + tuple(tensor_quant.buffers())  # after a first-call init
        self._cache = cache = CachedWeight.of(w, own, out, plain(out))
        return cache

    def forward(self, w: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        cache = self._cache_for(w)
        return super().forward(w) if cache is None else cache.out

    def quant_value(self, w: Union[torch.Tensor, QuantTensor]) -> torch.Tensor:
        """The dequantized weight (its shape): :meth:`forward`'s values, from the cache in eval."""
        cache = self._cache_for(w)
        return super().quant_value(w) if cache is None else cache.value
