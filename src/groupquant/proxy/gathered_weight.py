"""A weight that arrives already quantized: the unsharded weight of an MX all-gather under FSDP2.

:func:`groupquant.nn.enable_mx_all_gather` makes FSDP2 gather a layer's weight as element codes
and scale codes (:mod:`groupquant.packing.shard_payload`) instead of float. What FSDP2 then sets
as the layer's weight for its forward and backward is a :class:`GatheredWeight`: a tensor of the
weight's shape and dtype that holds no float values, only the gathered codes of each quantization
the layer asks for (its forward weight quantizer, and the input-gradient weight quantizer of a
recipe's backward), keyed by the quantizer's resolved spec.

A proxy given a :class:`GatheredWeight` does not quantize it again: :func:`gathered_value`
dequantizes the codes gathered for the proxy's own spec (bit for bit what the proxy computes from
the whole float weight) with the straight-through gradient to the weight (identity: the rule of
the dynamic weight quantizers this route admits). Aliases made by autograd or FSDP2 (``detach``,
``view``, ``as_strided``) share the codes; FSDP2 refills them in place before the backward
(``fsdp_post_all_gather(..., out=)``), so a weight saved in the forward reads the refilled codes.
Any other operation on it is an error that says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import torch

from ..packing.shard_payload import ShardCodec, dequantize_gathered

__all__ = ["GatheredCodes", "GatheredWeight", "gathered_value", "is_gathered"]


@dataclass(frozen=True)
class GatheredCodes:
    """One quantization of the whole weight as gathered: packed element codes and scale codes
    (1-D uint8 views of FSDP2's all-gather output), the tensor scale (or None), and the codec."""

    codes: torch.Tensor
    scales: torch.Tensor
    tensor_scale: Optional[torch.Tensor]
    codec: ShardCodec


class _SharedCodes:
    """The codes of a gathered weight by spec, shared by the weight and its aliases (refilled in place)."""

    def __init__(self, by_spec: Dict[Any, GatheredCodes]) -> None:
        self.by_spec = dict(by_spec)


_ALIASES = {torch.ops.aten.detach.default, torch.ops.aten.alias.default, torch.ops.aten.view.default,
            torch.ops.aten.as_strided.default, torch.ops.aten._unsafe_view.default}


class GatheredWeight(torch.Tensor):
    """The unsharded weight an MX all-gather gives FSDP2 (see module doc): shape and dtype of the
    float weight, values only through :func:`gathered_value`."""

    _shared: _SharedCodes

    @staticmethod
    def __new__(cls, shape: Tuple[int, ...], dtype: torch.dtype, device: torch.device,
                shared: _SharedCodes) -> "GatheredWeight":
        t = torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device=device, requires_grad=False)
        t._shared = shared
        return t

    @classmethod
    def of(cls, shape: Tuple[int, ...], dtype: torch.dtype, by_spec: Dict[Any, GatheredCodes]) -> "GatheredWeight":
        """A gathered weight of ``shape`` / ``dtype`` holding ``by_spec``."""
        device = next(iter(by_spec.values())).codes.device
        return cls(tuple(shape), dtype, device, _SharedCodes(by_spec))

    def refill(self, by_spec: Dict[Any, GatheredCodes]) -> None:
        """Point this weight and every alias of it at newly gathered codes (same specs)."""
        self._shared.by_spec = dict(by_spec)

    def specs(self) -> Tuple[Any, ...]:
        """The specs whose codes this weight holds."""
        return tuple(self._shared.by_spec)

    def dequantize(self, spec: Any, where: str = "") -> torch.Tensor:
        """The whole weight quantized by ``spec`` (dequantized, this tensor's dtype; no gradient)."""
        found = self._shared.by_spec.get(spec)
        if found is None:
            raise RuntimeError(f"{where or 'a quantizer'}: the MX all-gather did not gather this weight for "
                               f"{getattr(spec, 'name', spec)} (gathered: "
                               f"{', '.join(getattr(s, 'name', str(s)) for s in self.specs())}); "
                               "the layer's quantizers changed after groupquant.nn.enable_mx_all_gather")
        return dequantize_gathered(found.codes, found.scales, found.tensor_scale, found.codec, tuple(self.shape),
                                   self.dtype)

    def __repr__(self) -> str:
        return f"GatheredWeight(shape={tuple(self.shape)}, dtype={self.dtype}, specs={[s.name for s in self.specs()]})"

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func in _ALIASES:
            src = args[0]
            if func is torch.ops.aten.detach.default or tuple(args[1]) == tuple(src.shape):
                return cls(tuple(src.shape), src.dtype, src.device, src._shared)
        raise RuntimeError(f"{func} on a GatheredWeight: an MX-gathered weight holds codes, not float values; "
                        "it is read only through its layer's weight quantizers (groupquant.nn.enable_mx_all_gather)")


class _GatheredValue(torch.autograd.Function):
    """The dequantized codes of a spec, with the identity (straight-through) gradient to the weight."""

    @staticmethod
    def forward(ctx, w: GatheredWeight, spec: Any, where: str) -> torch.Tensor:  # type: ignore[override]
        return w.dequantize(spec, where)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        return grad, None, None


def is_gathered(x: Any) -> bool:
    """Whether ``x`` is a :class:`GatheredWeight`."""
    return isinstance(x, GatheredWeight)


def gathered_value(w: GatheredWeight, spec: Any, where: str = "") -> torch.Tensor:
    """``w`` quantized by ``spec`` from its gathered codes (straight-through gradient to ``w``)."""
    return _GatheredValue.apply(w, spec, where)
