"""Quantizing the functional calls of a model's forward: matmul / bmm / ``@``, scaled dot-product
attention and ``F.linear``, through a ``TorchFunctionMode`` entered around the forward.

Attention in most transformers is functional (``torch.matmul`` or
``F.scaled_dot_product_attention``), so swapping modules leaves its GEMMs in float.
:func:`quantize_functional` registers a forward pre-hook and a forward hook on the model that
enter and leave a :class:`FunctionalQuantMode`, and state-dict hooks that save and load its
quantizers (nothing global is patched; the returned handle removes every hook). Inside the forward:

- ``torch.matmul``, ``torch.bmm``, ``Tensor.matmul``, ``@`` between tensors of at least 2 dims run
  as :class:`~groupquant.nn.QuantMatMul` with the recipe's input quantizer on both operands (along
  K) and its gradient quantizers in backward;
- ``F.scaled_dot_product_attention`` runs decomposed exactly as torch defines it:
  ``Q(q) Q(k)^T`` (along the head dim) times ``scale``, plus the mask (``attn_mask`` bool or float,
  ``is_causal``), softmax over the keys (a query row whose mask hides every key gives 0, as in
  torch), dropout, then ``Q(P) Q(v)`` (along the keys);
  ``enable_gqa`` repeats the key / value heads as torch does;
- ``F.linear`` (a functional linear, not a converted layer) runs with the recipe's weight and input
  quantizers (a converted ``QuantLinear``'s own call is never quantized twice, eager or compiled;
  the quantizers and their state: :mod:`groupquant.nn.functional.functional_quantizers`);
- calls made while a layer that quantize_model left float runs are left alone (float on every route);
- with ``Recipe.elementwise`` set (e.g. ``"bfloat16"``), softmax (the attention's too), GELU, SiLU,
  sigmoid, tanh, ReLU, layer / RMS / group norm and same-shape adds and multiplies run in that
  precision (:mod:`groupquant.nn.functional.elementwise_calls`, :mod:`groupquant.elementwise`).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from ... import elementwise as ew
from ...ops.precision import resolve_precision
from .elementwise_calls import elementwise_handler
from .functional_quantizers import FunctionalQuantizers
from ..layers.inside import enter_untouched, inside_quant_layer, leave_untouched
from ..recipes import Recipe

__all__ = ["FunctionalQuantMode", "quantize_functional", "FunctionalHandle", "QUANTIZERS_NAME",
           "functional_quantizers"]

_MATMULS = (torch.matmul, torch.bmm, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.bmm)


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


def _write_out(func: Callable, result: torch.Tensor, args: tuple, out: Optional[torch.Tensor]) -> torch.Tensor:
    """``result``, or written into ``out`` (``torch.matmul(a, b, out=c)``) by torch's rules: no
    autograd through ``out=``, the dtype must match, ``out`` is resized to the result's shape."""
    if out is None:
        return result
    name = getattr(func, "__name__", "matmul")
    if torch.is_grad_enabled() and any(a.requires_grad for a in args):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic differentiation, "
                           "but one of the arguments requires grad.")
    if out.dtype != result.dtype:
        raise RuntimeError(f"{name}(): expected out tensor to have dtype {result.dtype}, but got {out.dtype} instead")
    if out.shape != result.shape:
        out.resize_(result.shape)
    return out.copy_(result)


def _attention_weights(scores: torch.Tensor, precision: Any) -> torch.Tensor:
    """Softmax over the keys (last dim), in ``precision`` when given. A query row whose every key
    is masked (all ``-inf``, e.g. a padding row) gives zeros, as torch's own attention does (its
    safe softmax), not NaN: a NaN would also enter a per-tensor scale (NVFP4) and spoil every other
    row. The row is softmaxed as zeros and then zeroed, so its gradient is zero too."""
    dead = (scores == float("-inf")).all(dim=-1, keepdim=True)
    live = scores.masked_fill(dead, 0.0)
    weights = torch.softmax(live, dim=-1) if precision is None else ew.softmax(live, -1, precision).to(scores.dtype)
    return weights.masked_fill(dead, 0.0)


class FunctionalQuantMode(TorchFunctionMode):
    """Routes a forward's functional GEMMs through groupquant's quantizers (see module doc)."""

    def __init__(self, quantizers: FunctionalQuantizers) -> None:
        super().__init__()
        self.quantizers = quantizers
        self.recipe = quantizers.recipe
        self.precision = None if self.recipe.elementwise is None else resolve_precision(self.recipe.elementwise)

    def _sdpa(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
              dropout_p: float = 0.0, is_causal: bool = False, scale: Optional[float] = None,
              enable_gqa: bool = False) -> torch.Tensor:
        """torch's definition of scaled dot-product attention, with quantized GEMMs."""
        scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
        if enable_gqa:
            key = key.repeat_interleave(query.size(-3) // key.size(-3), -3)
            value = value.repeat_interleave(query.size(-3) // value.size(-3), -3)
        scores = self.quantizers.product(query, key.transpose(-2, -1)) * scale
        bias = _sdpa_bias(query, key, attn_mask, is_causal)
        if bias is not None:
            scores = scores + bias
        weights = _attention_weights(scores, self.precision)
        if dropout_p > 0.0:
            weights = torch.dropout(weights, dropout_p, train=True)
        return self.quantizers.product(weights, value)

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        if inside_quant_layer():
            return func(*args, **kwargs)
        if func in _MATMULS and len(args) == 2 and set(kwargs) <= {"out"} and all(
                isinstance(a, torch.Tensor) and a.dim() >= 2 and a.is_floating_point() for a in args):
            return _write_out(func, self.quantizers.product(*args), args, kwargs.get("out"))
        if func is F.scaled_dot_product_attention:
            return self._sdpa(*args, **kwargs)
        if func is F.linear and self.recipe.weight_quant is not None:
            return self.quantizers.linear(*args, **kwargs)
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
        quantizers = self.mode.quantizers
        if quantizers.training != module.training:  # follow model.train() / model.eval()
            quantizers.train(module.training)
        self.mode.__enter__()


class _Leave:
    """Forward hook (always called): leave the mode."""

    def __init__(self, mode: FunctionalQuantMode) -> None:
        self.mode = mode

    def __call__(self, module: nn.Module, args: Any, output: Any) -> None:
        self.mode.__exit__(None, None, None)


class _LeaveFloat:
    """Forward pre-hook of a module quantize_model left float: the mode leaves its calls alone."""

    def __init__(self) -> None:
        self.tokens: List[Any] = []

    def __call__(self, module: nn.Module, args: Any) -> None:
        self.tokens.append(enter_untouched())


class _BackToMode:
    """Its forward hook (always called): the mode applies again."""

    def __init__(self, enter: _LeaveFloat) -> None:
        self.enter = enter

    def __call__(self, module: nn.Module, args: Any, output: Any) -> None:
        leave_untouched(self.enter.tokens.pop())


#: The state-dict prefix (under the model's) of the mode's quantizers.
QUANTIZERS_NAME = "groupquant_functional"


class _SaveQuantizers:
    """State-dict post-hook: the quantizers' state under ``groupquant_functional.``."""

    def __init__(self, quantizers: FunctionalQuantizers) -> None:
        self.quantizers = quantizers

    def __call__(self, module: nn.Module, state_dict: Dict[str, Any], prefix: str, local_metadata: Any) -> None:
        for key, value in self.quantizers.state_dict().items():
            state_dict[f"{prefix}{QUANTIZERS_NAME}.{key}"] = value


class _LoadQuantizers:
    """Load-state-dict pre-hook: takes the ``groupquant_functional.`` entries into the quantizers
    (missing / unexpected ones reported with the model's, under their full names)."""

    def __init__(self, quantizers: FunctionalQuantizers) -> None:
        self.quantizers = quantizers

    def __call__(self, module: nn.Module, state_dict: Dict[str, Any], prefix: str, local_metadata: Any, strict: bool,
                 missing_keys: List[str], unexpected_keys: List[str], error_msgs: List[str]) -> None:
        own = f"{prefix}{QUANTIZERS_NAME}."
        mine = {key[len(own):]: state_dict.pop(key) for key in [k for k in state_dict if k.startswith(own)]}
        result = self.quantizers.load_state_dict(mine, strict=False)
        missing_keys.extend(own + key for key in result.missing_keys)
        unexpected_keys.extend(own + key for key in result.unexpected_keys)


def quantize_functional(model: nn.Module, r: Recipe, float_modules: Sequence[nn.Module] = ()) -> FunctionalHandle:
    """Enter a :class:`FunctionalQuantMode` for ``r`` around every forward of ``model``; its
    quantizers (:class:`FunctionalQuantizers`) follow the model's train / eval and are saved and
    loaded with its state dict. The mode leaves alone every call made while one of
    ``float_modules`` runs (the layers quantize_model did not select), so that they stay float on
    every route."""
    quantizers = FunctionalQuantizers(r)
    quantizers.train(model.training)
    mode = FunctionalQuantMode(quantizers)
    model.__dict__["_groupquant_functional"] = mode
    hooks = [model.register_forward_pre_hook(_Enter(mode)), model.register_forward_hook(_Leave(mode), always_call=True),
             model.register_state_dict_post_hook(_SaveQuantizers(quantizers)),
             model.register_load_state_dict_pre_hook(_LoadQuantizers(quantizers))]
    for module in {id(m): m for m in float_modules}.values():
        enter = _LeaveFloat()
        hooks += [module.register_forward_pre_hook(enter),
                  module.register_forward_hook(_BackToMode(enter), always_call=True)]
    return FunctionalHandle(*hooks)


def functional_quantizers(model: nn.Module) -> Optional[FunctionalQuantizers]:
    """The quantizers of the functional mode quantize_model put on ``model`` (None when it has none)."""
    mode = model.__dict__.get("_groupquant_functional")
    return None if mode is None else mode.quantizers
