"""One layer's block rotation and the helpers the model-level transforms share: which block a
layer's quantizers call for, the weight rotation with its online counterpart, name patterns."""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import nn

from ..nn import QuantLinear
from ..nn.layers.input_rotation import ROTATION_ATTR, InputRotation
from ..nn.name_patterns import Patterns, as_patterns, matches_any
from ..nn.layers.quant_layers import is_quant_layer, iter_quant_layers
from ..ops.hadamard import fwht

__all__ = ["exclude_patterns", "quant_linears", "rotate_layer", "rotation_block_size",
           "weight_quant_mse", "write_weight"]

def exclude_patterns(exclude: Patterns, names: List[str]) -> List[str]:
    """``exclude`` as a list of fnmatch patterns; ValueError naming a pattern that matches no layer."""
    patterns = as_patterns(exclude, "exclude") or []
    for p in patterns:
        if not any(matches_any(n, (p,)) for n in names):
            raise ValueError(f"exclude={p!r} matches no module of the model; modules: {', '.join(names[:12])}"
                             f"{' ...' if len(names) > 12 else ''}")
    return patterns


def quant_linears(model: nn.Module) -> List[Tuple[str, QuantLinear]]:
    """``(name, layer)`` of each QuantLinear in ``model``, each layer once (its first name)."""
    return list(iter_quant_layers(model, kinds=QuantLinear))


@torch.no_grad()
def write_weight(module: nn.Module, weight: torch.Tensor) -> None:
    """Copy ``weight`` into ``module``'s own weight (identity kept: tying, optimizers): a quant
    layer's through its ``set_weight`` (its cached quantized weight dropped), a norm's or a float
    layer's as it is."""
    if is_quant_layer(module):
        module.set_weight(weight)
    else:
        module.weight.copy_(weight)


def rotation_block_size(layer: QuantLinear) -> Tuple[Optional[int], str]:
    """The block of the rotation matched to ``layer``'s quantizers (the smaller group size of a
    group-wise input quantizer along the features and a group-wise weight quantizer along ``in``),
    or ``(None, why not)``."""
    sizes = []
    for proxy, dims, what in ((layer.input_quant, (-1,), "input"), (layer.weight_quant, (1, -1), "weight")):
        spec = proxy.spec
        if proxy.is_quant_enabled and spec.is_group and spec.group_dim in dims:
            sizes.append(int(spec.group_size))
    if not sizes:
        return None, "no group-wise input or weight quantizer along the input features"
    b = min(sizes)
    if b & (b - 1):
        return None, f"group size {b} is not a power of two (a Walsh-Hadamard block must be)"
    if layer.in_features % b:
        return None, f"in_features={layer.in_features} is not a multiple of the group size {b}"
    return b, ""


def weight_quant_mse(layer: QuantLinear, weight: Optional[torch.Tensor] = None) -> float:
    """Mean squared error of the layer's weight quantizer on ``weight`` (default: its own)."""
    w = layer.weight if weight is None else weight
    with torch.no_grad():
        return float((layer.weight_quant.quant_value(w).double() - w.double()).pow(2).mean())


def rotate_layer(layer: QuantLinear, block_size: int) -> None:
    """``W := W H`` (float64, rounded once) and the online ``InputRotation(block_size)``."""
    layer.set_weight(fwht(layer.weight.detach().double(), block_size))
    setattr(layer, ROTATION_ATTR, InputRotation(block_size))
