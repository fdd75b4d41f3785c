"""Quantizing the functional calls of a model's forward: matmul / bmm / ``@``, scaled dot-product
attention and ``F.linear``, through a ``TorchFunctionMode`` entered around the forward.

Attention in most transformers is functional (``torch.matmul`` or
``F.scaled_dot_product_attention``), so swapping modules leaves its GEMMs in float.
:func:`quantize_functional` registers a forward pre-hook and a forward hook on the model that
enter and leave a :class:`FunctionalQuantMode` (nothing global is patched; the returned handle
removes both hooks). Inside the forward:

- ``torch.matmul``, ``torch.bmm``, ``Tensor.matmul``, ``@`` between tensors of at least 2 dims run
  as :class:`~groupquant.nn.QuantMatMul` with the recipe's input quantizer on both operands (along
  K) and its gradient quantizers in backward;
- ``F.scaled_dot_product_attention`` runs decomposed exactly as torch defines it:
  ``Q(q) Q(k)^T`` (along the head dim) times ``scale``, plus the mask (``attn_mask`` bool or float,
  ``is_causal``), softmax over the keys, dropout, then ``Q(P) Q(v)`` (along the keys);
  ``enable_gqa`` repeats the key / value heads as torch does;
- ``F.linear`` (a functional linear, not a converted layer) runs with the recipe's weight and input
  quantizers (a converted ``QuantLinear``'s own call is never quantized twice);
- with ``Recipe.elementwise`` set (e.g. ``"bfloat16"``), softmax (the attention's too), GELU, SiLU,
  sigmoid, tanh, ReLU, layer / RMS / group norm and same-shape adds and multiplies run in that
  precision (:mod:`.elementwise_calls`, :mod:`groupquant.elementwise`).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from .. import elementwise as ew
from ..ops.precision import resolve_precision
from .elementwise_calls import elementwise_handler
from .grad_slots import GRAD_SLOTS, matmul_slots
from .inside import inside_quant_layer
from .gemm_op import LINEAR
from .linear import QuantLinear
from .matmul import QuantMatMul
from .recipes import Recipe

__all__ = ["FunctionalQuantMode", "quantize_functional", "FunctionalHandle"]

_MATMULS = (torch.matmul, torch.bmm, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.bmm)


def _matmul_module(r: Recipe) -> QuantMatMul:
    """Activation x activation products: the recipe's input quantizer on both operands."""
    slots: Dict[str, Any] = matmul_slots({name: getattr(r, name) for name in GRAD_SLOTS})
    return QuantMatMul(a_quant=r.input_quant, b_quant=r.input_quant, quantize_backprop=r.quantize_backprop, **slots)


class _FunctionalLinear(nn.Module):
    """``F.linear(x, W, b)`` with the recipe's quantizers, through a weightless QuantLinear's route."""

    def __init__(self, r: Recipe) -> None:
        super().__init__()
        self.recipe = r
        self._layers: Dict[tuple, QuantLinear] = {}

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        key = (tuple(weight.shape), bias is not None, weight.device, weight.dtype)
        layer = self._layers.get(key)
        if layer is None:
            layer = QuantLinear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta",
                                **self.recipe.layer_kwargs())
            self._layers[key] = layer
        return layer._quant_gemm(x, LINEAR, weight, bias)


def _sdpa_bias(q: torch.Tensor, k: torch.Tensor, attn_mask: Optional[torch.Tensor], is_causal: bool) -> Optional[torch.Tensor]:
    """The additive attention bias torch's definition builds from ``attn_mask`` and ``is_causal``."""
    if attn_mask is None and not is_causal:
        return None
    L, S = q.size(-2), k.size(-2)
    bias = torch.zeros(L, S, dtype=q.dtype, device=q.device)
    if is_causal:
        if attn_mask is not None:
            raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril(diagonal=0)
        return bias.masked_fill(keep.logical_not(), float("-inf"))
    if attn_mask.dtype == torch.bool:
        return bias.masked_fill(attn_mask.logical_not(), float("-inf"))
    if not attn_mask.is_floating_point():
        raise TypeError(f"scaled_dot_product_attention: attn_mask must be bool or a float tensor, got {attn_mask.dtype}")
    return attn_mask + bias


class FunctionalQuantMode(TorchFunctionMode):
    """Routes a forward's functional GEMMs through groupquant's quantizers (see module doc)."""

    def __init__(self, r: Recipe) -> None:
        super().__init__()
        self.recipe = r
        self.matmul = _matmul_module(r)
        self.linear = _FunctionalLinear(r)
        self.precision = None if r.elementwise is None else resolve_precision(r.elementwise)

    def _sdpa(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
              dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
              enable_gqa: bool = False) -> torch.Tensor:
        """torch's definition of scaled dot-product attention, with quantized GEMMs."""
        scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
        if enable_gqa:
            key = key.repeat_interleave(query.size(-3) // key.size(-3), -3)
            value = value.repeat_interleave(query.size(-3) // value.size(-3), -3)
        scores = self.matmul(query, key.transpose(-2, -1)) * scale
        bias = _sdpa_bias(query, key, attn_mask, is_causal)
        if bias is not None:
            scores = scores + bias
        weights = (torch.softmax(scores, dim=-1) if self.precision is None
                   else ew.softmax(scores, -1, self.precision).to(scores.dtype))
        if dropout_p > 0.0:
            weights = torch.dropout(weights, dropout_p, train=True)
        return self.matmul(weights, value)

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        if inside_quant_layer():
            return func(*args, **kwargs)
        if func in _MATMULS and len(args) == 2 and all(isinstance(a, torch.Tensor) and a.dim() >= 2
                                                       and a.is_floating_point() for a in args):
            return self.matmul(*args)
        if func is F.scaled_dot_product_attention:
            return self._sdpa(*args, **kwargs)
        if func is F.linear and self.recipe.weight_quant is not None:
            return self.linear(*args, **kwargs)
        if self.precision is not None:
            handler = elementwise_handler(func)
            if handler is not None:
                out = handler(self.precision, *args, **kwargs)
                if out is not NotImplemented:
                    return out
        return func(*args, **kwargs)


class FunctionalHandle:
    """Removes what :func:`quantize_functional` registered (``handle.remove()``)."""

    def __init__(self, *hooks: Any) -> None:
        self._hooks = hooks

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()


class _Enter:
    """Forward pre-hook: enter the mode (a class, so that models with it pickle)."""

    def __init__(self, mode: FunctionalQuantMode) -> None:
        self.mode = mode

    def __call__(self, module: nn.Module, args: Any) -> None:
        self.mode.__enter__()


class _Leave:
    """Forward hook (always called): leave the mode."""

    def __init__(self, mode: FunctionalQuantMode) -> None:
        self.mode = mode

    def __call__(self, module: nn.Module, args: Any, output: Any) -> None:
        self.mode.__exit__(None, None, None)


def quantize_functional(model: nn.Module, r: Recipe) -> FunctionalHandle:
    """Enter a :class:`FunctionalQuantMode` for ``r`` around every forward of ``model``."""
    mode = FunctionalQuantMode(r)
    model.__dict__["_groupquant_functional"] = mode  # not a submodule: no state, not in state_dict
    return FunctionalHandle(model.register_forward_pre_hook(_Enter(mode)),
                            model.register_forward_hook(_Leave(mode), always_call=True))
