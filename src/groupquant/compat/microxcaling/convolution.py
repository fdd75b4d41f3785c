"""``Conv1d`` / ``Conv2d`` / ``Conv3d`` / ``conv1d`` / ``conv2d`` / ``conv3d`` taking ``mx_specs``, in microxcaling's order.

Forward: input rounded (``round_output``), weight and bias (``round_weight``); MX blocks along the
input channels (dim 1 of both) in ``a_elem_format`` / ``w_elem_format``; float convolution with the
rounded bias; output rounded (``round_output``). Backward (backward specs): dY rounded
(``round_grad_input``); grad-weight from input and dY blocked along the batch (dim 0), both in
``a_elem_format``; grad-input from weight blocked along the output channels (dim 0, ``w_elem_format``)
and dY along its channels (dim 1, ``a_elem_format``); results rounded (``round_grad_weight``,
``round_grad_input``); bias gradient the rounded sum of dY.

As in microxcaling: convolutions use the forward formats in backward (not the ``*_bp*`` ones),
and their MX rounding is always ``nearest`` (the ``round_mx_*`` settings are not read here).

This is ``recipe._recipe(specs, gemm="conv")`` run by groupquant's quant-layer route
(:class:`groupquant.nn.functional_quantizers.FunctionalConv`, borrowing ``W`` and ``b``).
:class:`ConvFunction` (the same order with the block-by-block quantizer of :mod:`.quantize`) is
taken only for what no recipe carries: the settings of :func:`.recipe.native_problem`, and a
grouped convolution whose backward blocks along the output channels cross its groups
(``out_channels / groups`` not a multiple of ``block_size``: groupquant's backward keeps a block
inside one reduction; aligned groups run on the quant-layer route).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Optional, Tuple

import torch
from torch.nn import grad as nn_grad

from . import _torch
from ._torch import native_torch
from ...nn.functional_quantizers import FunctionalConv
from .recipe import _recipe, native_problem
from .mapping import check_settings
from .module_specs import MxSpecsMixin
from .quantize import quantize_elemwise_op, quantize_mx_op
from .specs import MxSpecs, apply_mx_specs, get_backwards_mx_specs

__all__ = ["Conv1d", "Conv2d", "Conv3d", "conv1d", "conv2d", "conv3d", "ConvFunction"]

_MX_ROUND = "nearest"
_OPS: Mapping[int, Tuple[Callable, Callable, Callable]] = {
    1: (_torch.conv1d, nn_grad.conv1d_input, nn_grad.conv1d_weight),
    2: (_torch.conv2d, nn_grad.conv2d_input, nn_grad.conv2d_weight),
    3: (_torch.conv3d, nn_grad.conv3d_input, nn_grad.conv3d_weight),
}


def _ops(x: torch.Tensor) -> Tuple[Callable, Callable, Callable]:
    """(forward, grad-input, grad-weight) functions for ``x``'s number of spatial dims."""
    if x.ndim - 2 not in _OPS:
        raise ValueError(f"conv1d/conv2d/conv3d take a 3-d, 4-d or 5-d input, got shape {tuple(x.shape)}")
    return _OPS[x.ndim - 2]


class ConvFunction(torch.autograd.Function):
    """Convolution with microxcaling's roundings forward and backward (see the module notes)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],  # type: ignore[override]
                geometry: Tuple[Any, Any, Any, int], specs: MxSpecs) -> torch.Tensor:
        conv = _ops(x)[0]
        bf_x = quantize_elemwise_op(x, specs, specs["round_output"])
        bf_w = quantize_elemwise_op(weight, specs, specs["round_weight"])
        bf_b = None if bias is None else quantize_elemwise_op(bias, specs, specs["round_weight"])
        ctx.save_for_backward(*((bf_x, bf_w) if specs["quantize_backprop"] else (x, weight)))
        ctx.geometry, ctx.has_bias = geometry, bias is not None
        qx = quantize_mx_op(bf_x, specs, specs["a_elem_format"], axes=[1], round=_MX_ROUND)
        qw = quantize_mx_op(bf_w, specs, specs["w_elem_format"], axes=[1], round=_MX_ROUND)
        out = conv(qx, qw, bf_b, *geometry)
        ctx.specs = get_backwards_mx_specs(specs)
        return quantize_elemwise_op(out, specs, specs["round_output"])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        x, weight = ctx.saved_tensors
        s = ctx.specs
        stride, padding, dilation, groups = ctx.geometry
        _, conv_input, conv_weight = _ops(x)
        grad = quantize_elemwise_op(grad, s, s["round_grad_input"])
        qx = quantize_mx_op(x, s, s["a_elem_format"], axes=[0], round=_MX_ROUND)
        qg = quantize_mx_op(grad, s, s["a_elem_format"], axes=[0], round=_MX_ROUND)
        grad_w = conv_weight(qx, weight.shape, qg, stride=stride, padding=padding, dilation=dilation, groups=groups)
        grad_w = quantize_elemwise_op(grad_w, s, s["round_grad_weight"])
        qw = quantize_mx_op(weight, s, s["w_elem_format"], axes=[0], round=_MX_ROUND)
        qg1 = quantize_mx_op(grad, s, s["a_elem_format"], axes=[1], round=_MX_ROUND)
        grad_x = conv_input(x.shape, qw, qg1, stride=stride, padding=padding, dilation=dilation, groups=groups)
        grad_x = quantize_elemwise_op(grad_x, s, s["round_grad_input"])
        grad_b = None
        if ctx.has_bias:
            dims = [0] + list(range(2, grad.ndim))
            grad_b = quantize_elemwise_op(grad.sum(dims), s, s["round_grad_weight"])
        return grad_x, grad_w, grad_b, None, None


def _conv(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], stride: Any, padding: Any,
          dilation: Any, groups: int, mx_specs: Optional[Mapping[str, Any]], spatial: int) -> torch.Tensor:
    """The convolution with ``spatial`` dims (1, 2, 3), plain when ``mx_specs`` is None. An unbatched
    input (no N dim) gives an unbatched output, as torch's convolutions do."""
    if x.ndim == spatial + 1:
        return _conv(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups, mx_specs, spatial).squeeze(0)
    if x.ndim != spatial + 2:
        raise ValueError(f"conv{spatial}d takes a {spatial + 2}-d input (N, C, ...) or an unbatched "
                         f"{spatial + 1}-d one, got shape {tuple(x.shape)}")
    if mx_specs is None:
        return _OPS[spatial][0](x, weight, bias, stride, padding, dilation, groups)
    if isinstance(padding, str):
        raise NotImplementedError(f"padding={padding!r}: give the padding as numbers with mx_specs")
    specs = apply_mx_specs(mx_specs)
    check_settings(specs, ("a_elem_format", "w_elem_format"), (), ("round_output", "round_weight",
                                                                   "round_grad_input", "round_grad_weight"))
    if _blocks_span_groups(specs, weight.shape[0], groups) or native_problem(specs) is not None:
        return ConvFunction.apply(x, weight, bias, (stride, padding, dilation, groups), specs)
    layer = _layer(tuple(sorted(specs.items(), key=lambda item: item[0])), tuple(weight.shape), bias is not None,
                   weight.device, groups)
    geometry = {name: tuple(int(v) for v in _ntuple(spatial)(g))
                for name, g in (("stride", stride), ("padding", padding), ("dilation", dilation))}
    with native_torch():
        return layer(x, weight, bias, **geometry)


def _ntuple(n: int) -> Callable[[Any], Tuple[Any, ...]]:
    """A setting given as one number or one per spatial dim, as a tuple of ``n``."""
    return lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def _blocks_span_groups(specs: Mapping[str, Any], out_channels: int, groups: int) -> bool:
    """Whether microxcaling's backward blocks of ``dY`` (dim 1) and ``W`` (dim 0) along the output
    channels cross the groups of a grouped convolution: ``out_channels / groups`` not a multiple of
    the block (groupquant's backward keeps a block inside one reduction, so :class:`ConvFunction`
    computes these)."""
    if groups == 1 or not specs["quantize_backprop"] or not (specs["a_elem_format"] or specs["w_elem_format"]):
        return False
    size = 1 if specs["shared_exp_method"] == "none" else specs["block_size"]
    return not isinstance(size, int) or size <= 0 or (out_channels // groups) % size != 0


@functools.lru_cache(maxsize=128)
def _layer(key: Tuple[Tuple[str, Any], ...], shape: Tuple[int, ...], bias: bool,
           device: torch.device, groups: int = 1) -> FunctionalConv:
    """The quant layer of one ``mx_specs`` for a weight of ``shape`` (stateless: dynamic MX scales)."""
    return FunctionalConv(shape, bias, _recipe(MxSpecs(dict(key)), "mx_specs", gemm="conv"), groups=groups,
                          device=device)


def conv1d(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1, mx_specs: Optional[Mapping[str, Any]] = None,
           name: Optional[str] = None) -> torch.Tensor:
    """``F.conv1d`` with ``mx_specs`` (plain when None)."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, mx_specs, 1)


def conv2d(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1, mx_specs: Optional[Mapping[str, Any]] = None,
           name: Optional[str] = None) -> torch.Tensor:
    """``F.conv2d`` with ``mx_specs`` (plain when None)."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, mx_specs, 2)


def conv3d(input: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1, mx_specs: Optional[Mapping[str, Any]] = None,
           name: Optional[str] = None) -> torch.Tensor:
    """``F.conv3d`` with ``mx_specs`` (plain when None)."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, mx_specs, 3)


class _MxConvMixin(MxSpecsMixin):
    """``mx_specs`` handling shared by :class:`Conv1d` and :class:`Conv2d`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.padding_mode != "zeros":
            raise NotImplementedError(f"padding_mode={self.padding_mode!r} with mx_specs; use 'zeros'")
        return _conv(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups,
                     self.specs_or_none(),
                     len(self.kernel_size))


class Conv1d(_MxConvMixin, torch.nn.Conv1d):
    """``torch.nn.Conv1d`` taking ``mx_specs`` (and ``name``)."""

    def __init__(self, *args: Any, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_mx(mx_specs, name)


class Conv2d(_MxConvMixin, torch.nn.Conv2d):
    """``torch.nn.Conv2d`` taking ``mx_specs`` (and ``name``)."""

    def __init__(self, *args: Any, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_mx(mx_specs, name)


class Conv3d(_MxConvMixin, torch.nn.Conv3d):
    """``torch.nn.Conv3d`` taking ``mx_specs`` (and ``name``)."""

    def __init__(self, *args: Any, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_mx(mx_specs, name)
