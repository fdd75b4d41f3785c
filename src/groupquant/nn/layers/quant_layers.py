"""Finding a model's quant layers: :func:`is_quant_layer` and :func:`iter_quant_layers`.

A quant layer is a module built on :class:`~groupquant.nn.layers.quant_layer.QuantLayerMixin` with a
weight slot (a :class:`~groupquant.proxy.WeightQuantProxy` as ``weight_quant``, float or
quantizing) and a weight of its own: ``QuantLinear``, ``QuantConv1d/2d/3d``, ``PackedLinear``
(packed storage). The functional mode's ``FunctionalLinear`` / ``FunctionalConv`` borrow the
weight at each call (``borrows_weight``) and are not; neither are activation layers
(``QuantIdentity``, ...) or ``QuantMatMul``, which have no weight slot. Together with the layer's
own ``weight_spec``, ``set_weight``, ``gemm_op`` and ``quant_gemm`` (:class:`QuantLayerMixin`),
this is the protocol calibration, export and the LLM tools read quant layers through.
"""
from __future__ import annotations

from typing import Iterator, Optional, Tuple, Type, Union

from torch import nn

from ...proxy import WeightQuantProxy
from .quant_layer import QuantLayerMixin

__all__ = ["is_quant_layer", "iter_quant_layers"]

Kinds = Union[Type[nn.Module], Tuple[Type[nn.Module], ...]]


def is_quant_layer(module: object) -> bool:
    """Whether ``module`` is a quant layer with a weight of its own (see the module doc)."""
    return (isinstance(module, QuantLayerMixin) and not module.borrows_weight
            and isinstance(module._modules.get("weight_quant"), WeightQuantProxy))  # type: ignore[attr-defined]


def _check_kinds(kinds: Optional[Kinds]) -> Tuple[type, ...]:
    """``kinds`` as a tuple of classes; TypeError naming ``kinds`` otherwise."""
    if kinds is None:
        return ()
    given = kinds if isinstance(kinds, tuple) else (kinds,)
    if not given or not all(isinstance(k, type) for k in given):
        raise TypeError(f"kinds must be a layer class or a tuple of them (e.g. QuantLinear), got {kinds!r}")
    return given


def iter_quant_layers(model: nn.Module, kinds: Optional[Kinds] = None, *,
                      prefix: str = "") -> Iterator[Tuple[str, nn.Module]]:
    """``(name, layer)`` for every quant layer of ``model`` (:func:`is_quant_layer`), in
    ``named_modules`` order (``model`` itself included, named ``prefix``), only those that are
    instances of ``kinds`` when given (a class or a tuple of classes). ``prefix``: the name of
    ``model`` inside a larger model (``"model.layers.3"``), so the names are full ones
    (``"model.layers.3.mlp.up_proj"``), as ``named_modules(prefix=...)`` writes them."""
    wanted = _check_kinds(kinds)
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a module name (str), got {prefix!r}")
    for name, module in model.named_modules(prefix=prefix):
        if is_quant_layer(module) and (not wanted or isinstance(module, wanted)):
            yield name, module
