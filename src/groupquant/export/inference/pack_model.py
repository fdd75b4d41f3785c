"""pack_model / unpack_model: a model's group-quantized linear layers to packed inference layers and back.

``groupquant.pack_model(model)`` replaces every :class:`~groupquant.nn.QuantLinear` whose weight
quantizer is group-wise with byte-coded scales by a :class:`~.packed_linear.PackedLinear` (packed
codes, scale bytes, bias; the layer's quantizer proxies kept), in place, and returns the model.
QuantConv layers and plain ``nn.Linear`` stay as they are. ``unpack_model`` is the way back to
trainable QuantLinears.

- A layer registered under several names (``nn.Sequential(l, act, l)``) is packed once and the one
  PackedLinear is put at every name (it stays shared).
- A layer whose weight is tied to another module (an ``nn.Embedding`` sharing the output head's
  weight) stays a QuantLinear, with a warning: packing would give the head its own copy and untie
  them (the embedding needs the float values; only the head's quantizer sees them quantized).
- A quant layer the packer does not know (``QuantConv1d`` / ``QuantConv2d``, any other quant layer
  with a quantized weight that is not a QuantLinear) stays as it is, fake-quant, with a warning
  naming it; so does a QuantLinear skipped by ``skip_unsupported`` (the warning says why).
- A model with no quantized QuantLinear (a float model) is a :class:`PackError`: nothing to pack.
- ``progress``: a bar over the layers (tqdm, where installed) for models with many layers.
"""
from __future__ import annotations

import warnings
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from torch import nn

from ...nn import QuantLinear
from ...nn.layers.quant_layers import is_quant_layer, iter_quant_layers
from ..errors import PackError
from .packed_linear import PackedLinear

__all__ = ["pack_model", "unpack_model", "packed_layers", "PROGRESS_MIN_LAYERS"]

#: ``progress=None`` shows a bar (where tqdm is installed) from this many layers to pack.
PROGRESS_MIN_LAYERS = 16


def _replace(model: nn.Module, name: str, new: nn.Module) -> nn.Module:
    """Put ``new`` at dotted ``name`` in ``model`` (the root itself when name is ''); returns the root."""
    if not name:
        return new
    parent_name, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent_name) if parent_name else model, child, new)
    return model


def _names_of(model: nn.Module, kind: type) -> Dict[nn.Module, List[str]]:
    """Every module of ``kind`` with all the names it is registered under (first-seen order)."""
    names: Dict[nn.Module, List[str]] = {}
    for name, m in model.named_modules(remove_duplicate=False):
        if isinstance(m, kind):
            names.setdefault(m, []).append(name)
    return names


def _parameter_holders(model: nn.Module) -> Dict[int, List[Tuple[str, nn.Module]]]:
    """``id(parameter) -> [(full name, module holding it)]`` over every registration in ``model``."""
    holders: Dict[int, List[Tuple[str, nn.Module]]] = {}
    for module_name, m in model.named_modules(remove_duplicate=False):
        for pname, p in m.named_parameters(recurse=False):
            holders.setdefault(id(p), []).append((f"{module_name}.{pname}" if module_name else pname, m))
    return holders


def _tied_elsewhere(holders: Dict[int, List[Tuple[str, nn.Module]]], layer: nn.Module) -> Optional[str]:
    """The name of a parameter of another module that is ``layer.weight`` itself, or None."""
    return next((name for name, m in holders.get(id(layer.weight), []) if m is not layer), None)


def _progress(items: List, enabled: Optional[bool]) -> Iterable:
    """``items`` wrapped in a tqdm bar when ``enabled`` (None: from PROGRESS_MIN_LAYERS items, if tqdm is installed)."""
    if enabled is False or (enabled is None and len(items) < PROGRESS_MIN_LAYERS):
        return items
    try:
        from tqdm.auto import tqdm
    except ImportError:
        if enabled:
            warnings.warn("pack_model(progress=True): tqdm is not installed; packing without a progress bar",
                          UserWarning, stacklevel=3)
        return items
    return tqdm(items, desc="pack_model", unit="layer")


def pack_model(model: nn.Module, *, skip_unsupported: bool = False, progress: Optional[bool] = None) -> nn.Module:
    """Replace each QuantLinear with a group-wise quantized weight by a PackedLinear (in place).

    A QuantLinear whose weight is quantized but not group-wise with byte-coded scales (per-tensor
    or per-channel, float scales, codes wider than 8 bits) raises :class:`PackError` naming the
    layer and the setting, unless ``skip_unsupported`` (then it stays a QuantLinear); a QuantLinear
    with a float weight (``weight_quant=None``) stays as it is; a model without any quantized
    QuantLinear (nor PackedLinear) raises PackError. Shared layers stay shared; tied weights stay
    tied (see the module docstring). ``progress``: True / False for a progress bar over the layers;
    None shows one from :data:`PROGRESS_MIN_LAYERS` layers where tqdm is installed. Returns the model
    (a new object only when the model itself is a QuantLinear). Packed layers compute the input
    gradient only (their weight is not trainable).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    layers = [(m, names) for m, names in _names_of(model, QuantLinear).items()
              if is_quant_layer(m) and m.weight_quant.is_quant_enabled]
    if not layers:
        if any(True for _ in packed_layers(model)):
            return model  # packed already
        raise PackError(f"pack_model: {type(model).__name__} has no QuantLinear with a weight quantizer, so nothing "
                        "would be packed; quantize it first (groupquant.quantize_model(model, recipe=...) or "
                        "QuantLinear(..., weight_quant=MXFloat4e2m1Weight))")
    holders = _parameter_holders(model)
    packed_any = False
    for layer, names in _progress(layers, progress):
        label = names[0] or type(layer).__name__
        tied = _tied_elsewhere(holders, layer)
        if tied is not None:
            warnings.warn(f"pack_model: {label!r} stays a QuantLinear: its weight is tied to {tied!r}, which needs "
                          "the float values (packing would untie them)", UserWarning, stacklevel=2)
            continue
        try:
            packed = PackedLinear.from_quant_linear(layer, name=label)
        except PackError as e:
            if skip_unsupported:
                warnings.warn(f"pack_model: {label!r} stays fake-quant (skip_unsupported): {e}", UserWarning,
                              stacklevel=2)
                continue
            raise
        for name in names:
            model = _replace(model, name, packed)
        packed_any = True
    _warn_unknown_layers(model)
    if not packed_any:
        warnings.warn(f"pack_model: no layer of {type(model).__name__} was packed (every quantized QuantLinear is "
                      "unsupported or tied); the model is returned as it is", UserWarning, stacklevel=2)
    return model


def _warn_unknown_layers(model: nn.Module) -> None:
    """One warning per quant layer with a quantized weight that pack_model does not pack (not a
    QuantLinear: QuantConv1d / QuantConv2d, other quant layers), naming it: it stays fake-quant."""
    for name, m in iter_quant_layers(model):
        if not isinstance(m, (QuantLinear, PackedLinear)) and m.weight_quant.is_quant_enabled:
            warnings.warn(f"pack_model: {name or type(m).__name__!r} ({type(m).__name__}) stays fake-quant: the "
                          "packer packs QuantLinear layers only", UserWarning, stacklevel=3)


def unpack_model(model: nn.Module) -> nn.Module:
    """Replace each PackedLinear by the trainable QuantLinear it came from (dequantized weight,
    same quantizers; a layer shared under several names stays shared); in place, returns the model."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for layer, names in _names_of(model, PackedLinear).items():
        back = layer.to_quant_linear()
        for name in names:
            model = _replace(model, name, back)
    return model


def packed_layers(model: nn.Module) -> Iterator[Tuple[str, PackedLinear]]:
    """``(name, layer)`` of every PackedLinear in ``model`` (once each)."""
    return ((n, m) for n, m in model.named_modules() if isinstance(m, PackedLinear))
