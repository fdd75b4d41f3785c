"""The quantizers a functional-quantization mode applies, with their state.

:func:`~groupquant.nn.functional.functional_mode.quantize_functional` keeps one :class:`FunctionalQuantizers`
per model, outside the model's module tree (a ``Sequential`` runs every child it has, and export
walks the tree), yet it behaves like a layer's quantizers: it follows the model's ``train()`` /
``eval()`` at each forward (running statistics update in training only; the eval weight cache
works), it moves to the device of the tensors it quantizes, and its state (running statistics,
learned scales) is in ``model.state_dict()`` under ``groupquant_functional.`` and loads back with
``model.load_state_dict``.

- ``matmul``: one :class:`~groupquant.nn.QuantMatMul` for every activation x activation product.
- ``linears``: one :class:`FunctionalLinear` per ``F.linear`` weight shape (``out32_in16_bias``),
  made at the first call with that shape (and by ``load_state_dict`` when the state dict has one).
"""
from __future__ import annotations

import itertools
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from ..gemm.gemm_op import LINEAR, GemmOp
from ..gemm.grad_slots import GRAD_SLOTS, matmul_slots
from ..layers.matmul import QuantMatMul
from ..layers.quant_layer import QuantLayerMixin
from ..recipes import Recipe

__all__ = ["FunctionalQuantizers", "FunctionalLinear", "FunctionalConv"]

_FORWARD = ("weight_quant", "input_quant", "output_quant", "bias_quant")


def _matmul_module(r: Recipe) -> QuantMatMul:
    """Activation x activation products: the recipe's input quantizer on both operands."""
    slots: Dict[str, Any] = matmul_slots({name: getattr(r, name) for name in GRAD_SLOTS})
    return QuantMatMul(a_quant=r.input_quant, b_quant=r.input_quant, quantize_backprop=r.quantize_backprop, **slots)


class FunctionalLinear(QuantLayerMixin, nn.Module):
    """``F.linear(x, W, b)`` with a recipe's quantizers for an ``[out, in]`` weight: it holds the
    quantizers (and their state) and borrows ``W`` and ``b`` at each call, computing through the
    quant layers' one route (``_quant_gemm``). Not a QuantLinear: it owns no weight, so packing
    and export leave it alone."""

    borrows_weight = True

    def __init__(self, out_features: int, in_features: int, bias: bool, r: Recipe,
                 device: Optional[torch.device] = None) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = in_features, out_features
        kwargs = dict(r.layer_kwargs())
        quants = {name: kwargs.pop(name, None) for name in _FORWARD}
        # shape-only stand-ins (no memory): the quantizers are sized from the weight / bias shapes
        stand_in = torch.empty((), device=device)
        self.weight: Optional[torch.Tensor] = stand_in.expand(out_features, in_features)
        self.bias: Optional[torch.Tensor] = stand_in.expand(out_features) if bias else None
        self._init_quant(**quants, feature_dim=-1, quant_kwargs=kwargs)
        self.weight = self.bias = None  # borrowed per call

    def extra_repr(self) -> str:
        return f"out_features={self.out_features}, in_features={self.in_features}"

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self._quant_gemm(x, LINEAR, weight, bias)


class FunctionalConv(QuantLayerMixin, nn.Module):
    """``F.conv{1,2,3}d(x, W, b, ...)`` with a recipe's quantizers for a weight of ``shape``
    (``[O, I/groups, k...]``): like :class:`FunctionalLinear` it borrows ``W`` and ``b`` at each
    call and computes through the quant layers' one route, activations grouped along the channels
    (dim 1 of batched input). ``groups``: the convolution's groups (the backward set-up depends on it).
    ``blocks_across_groups``: the grad-input GEMM's operands (``dY`` along dim 1, ``W`` along dim 0)
    are quantized whole, their blocks free to span groups (microxcaling's convolution); otherwise a
    grouped convolution quantizes its backward only when every block lies inside one group."""

    borrows_weight = True

    def __init__(self, shape: Tuple[int, ...], bias: bool, r: Recipe, groups: int = 1,
                 device: Optional[torch.device] = None, blocks_across_groups: bool = False) -> None:
        nn.Module.__init__(self)
        self.groups, self.padding_mode, self.blocks_across_groups = groups, "zeros", blocks_across_groups
        kwargs = dict(r.layer_kwargs())
        quants = {name: kwargs.pop(name, None) for name in _FORWARD}
        stand_in = torch.empty((), device=device)
        self.weight: Optional[torch.Tensor] = stand_in.expand(*shape)
        self.bias: Optional[torch.Tensor] = stand_in.expand(shape[0]) if bias else None
        self._init_quant(**quants, feature_dim=1, quant_kwargs=kwargs)
        self.weight = self.bias = None  # borrowed per call

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Tuple[int, ...],
                padding: Tuple[int, ...], dilation: Tuple[int, ...]) -> torch.Tensor:
        """The convolution of batched ``x`` with zero ``padding`` given as ints per spatial dim."""
        return self._quant_gemm(x, GemmOp("conv", stride, padding, dilation, self.groups), weight, bias)


def _on_device(module: nn.Module, device: torch.device) -> nn.Module:
    """``module`` with its state (if any) on ``device`` (moved there once, values kept)."""
    state = next(itertools.chain(module.buffers(), module.parameters()), None)
    if state is not None and state.device != device:
        module.to(device)
    return module


def _linear_key(weight: torch.Tensor, bias: Optional[torch.Tensor]) -> str:
    """The name of the FunctionalLinear for this weight shape (a ModuleDict key: no dots)."""
    return f"out{weight.shape[0]}_in{weight.shape[1]}" + ("_bias" if bias is not None else "")


class FunctionalQuantizers(nn.Module):
    """The mode's quantizers for recipe ``r`` (see module doc)."""

    def __init__(self, r: Recipe) -> None:
        super().__init__()
        self.recipe = r
        self.matmul = _matmul_module(r)
        self.linears = nn.ModuleDict()

    def product(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a @ b`` quantized (both operands along K)."""
        return _on_device(self.matmul, a.device)(a, b)

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``F.linear`` quantized; a 1-D weight ``[in]`` (a dot product, as torch allows) is the
        ``[1, in]`` weight's single output."""
        if not isinstance(weight, torch.Tensor) or weight.dim() not in (1, 2):
            raise ValueError(f"F.linear under quantize_model(recipe={self.recipe.name!r}): the weight must be "
                             f"[out, in] or [in], got {tuple(getattr(weight, 'shape', ()))}")
        if weight.dim() == 1:
            if bias is not None and bias.numel() != 1:
                raise ValueError(f"F.linear with a 1-D weight {tuple(weight.shape)} takes a bias of one element, "
                                 f"got {tuple(bias.shape)}")
            out = self.linear(x, weight.unsqueeze(0), None if bias is None else bias.reshape(1))
            return out.squeeze(-1)
        return self._layer(weight, bias)(x, weight, bias)

    def _layer(self, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> FunctionalLinear:
        """The FunctionalLinear for this weight shape, made on the weight's device the first time
        (and moved there with its state when the weight has moved)."""
        key = _linear_key(weight, bias)
        layer = self.linears[key] if key in self.linears else None
        if layer is None:
            layer = FunctionalLinear(weight.shape[0], weight.shape[1], bias is not None, self.recipe, weight.device)
            layer.train(self.training)
            self.linears[key] = layer
        return _on_device(layer, weight.device)

    def _load_from_state_dict(self, state_dict: Dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        """Make the FunctionalLinears the state dict has state for, so that it loads into them."""
        for key in state_dict:
            if key.startswith(prefix + "linears."):
                name = key[len(prefix + "linears."):].split(".", 1)[0]
                if name not in self.linears:
                    self.linears[name] = self._layer_named(name)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _layer_named(self, name: str) -> FunctionalLinear:
        """The FunctionalLinear a state-dict name (``out32_in16_bias``) stands for (on the CPU)."""
        parts = name.split("_")
        try:
            out_features, in_features = int(parts[0][3:]), int(parts[1][2:])
        except (IndexError, ValueError):
            raise ValueError(f"state dict entry 'linears.{name}' of the functional quantizers is not "
                             "out<O>_in<I>[_bias]") from None
        layer = FunctionalLinear(out_features, in_features, parts[-1] == "bias", self.recipe)
        return layer.train(self.training)
