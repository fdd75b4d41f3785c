"""pack_model / unpack_model: a model's group-quantized linear layers to packed inference layers and back.

``groupquant.pack_model(model)`` replaces every :class:`~groupquant.nn.QuantLinear` whose weight
quantizer is group-wise with E8M0 scales by a :class:`~.packed_linear.PackedLinear` (packed codes,
scale bytes, bias; input quantizers kept), in place, and returns the model. QuantConv layers and
plain ``nn.Linear`` stay as they are. ``unpack_model`` is the way back to trainable QuantLinears.
"""
from __future__ import annotations

from typing import Iterator, Tuple

from torch import nn

from ..nn import QuantLinear
from ..proxy import QuantProxy
from .packed_linear import PackedLinear, PackError

__all__ = ["pack_model", "unpack_model", "packed_layers"]


def _replace(model: nn.Module, name: str, new: nn.Module) -> nn.Module:
    """Put ``new`` at dotted ``name`` in ``model`` (the root itself when name is ''); returns the root."""
    if not name:
        return new
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, new)
    return model


def _quant_linears(model: nn.Module) -> Iterator[Tuple[str, QuantLinear]]:
    return ((n, m) for n, m in list(model.named_modules()) if isinstance(m, QuantLinear))


def pack_model(model: nn.Module, *, skip_unsupported: bool = False) -> nn.Module:
    """Replace each QuantLinear with a group-wise quantized weight by a PackedLinear (in place).

    A QuantLinear whose weight is quantized but not group-wise with E8M0 scales (per-tensor or
    per-channel, float scales, codes wider than 8 bits) raises :class:`PackError` naming the layer
    and the setting, unless ``skip_unsupported`` (then it stays a QuantLinear); a QuantLinear with
    a float weight (``weight_quant=None``) stays as it is. Returns the model (a new object only when
    the model itself is a QuantLinear). The packed model is for inference (no gradients).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for name, layer in _quant_linears(model):
        proxy = layer.weight_quant
        if not (isinstance(proxy, QuantProxy) and proxy.is_quant_enabled):
            continue
        try:
            packed = PackedLinear.from_quant_linear(layer, name=name or type(layer).__name__)
        except PackError:
            if skip_unsupported:
                continue
            raise
        model = _replace(model, name, packed)
    return model


def unpack_model(model: nn.Module) -> nn.Module:
    """Replace each PackedLinear by the trainable QuantLinear it came from (dequantized weight,
    same quantizers); in place, returns the model."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for name, layer in list(model.named_modules()):
        if isinstance(layer, PackedLinear):
            model = _replace(model, name, layer.to_quant_linear())
    return model


def packed_layers(model: nn.Module) -> Iterator[Tuple[str, PackedLinear]]:
    """``(name, layer)`` of every PackedLinear in ``model``."""
    return ((n, m) for n, m in model.named_modules() if isinstance(m, PackedLinear))
