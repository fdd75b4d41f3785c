"""What every quant layer shares: its proxies, keyword routing, and quant_weight()/quant_bias()."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Union

import torch

from ..proxy import ActQuantProxy, BiasQuantProxy, WeightQuantProxy
from ..quant_tensor import QuantTensor, plain
from .keywords import route_keywords
from .lean_gemm import GemmOp, lean_applies, lean_quant_gemm

__all__ = ["QuantLayerMixin"]


class QuantLayerMixin:
    """Mixed into a torch layer (first base). Sets ``weight_quant``, ``bias_quant``,
    ``input_quant``, ``output_quant`` proxies (identity where the quantizer is None).

    ``return_quant_tensor``: return the output quant tensor (when ``output_quant`` is set)
    instead of a plain tensor.

    Memory in training: with a dynamic (abs-max, MX) weight quantizer and the identity STE, a
    weight layer runs :func:`groupquant.nn.lean_gemm.lean_quant_gemm`, whose backward frees the
    fake-quantized weight before the weight gradient is allocated (peak memory near a float
    layer's, same results bit for bit). Set ``memory_lean_backward = False`` on the layer (or the
    class) for the plain autograd path.
    """

    memory_lean_backward: bool = True

    def _init_quant(self, *, weight_quant: Optional[type] = None, bias_quant: Optional[type] = None,
                    input_quant: Optional[type] = None, output_quant: Optional[type] = None,
                    feature_dim: int = -1, return_quant_tensor: bool = False, has_weight: bool = True,
                    quant_kwargs: Mapping[str, Any]) -> None:
        """Build the proxies from the quantizers and the prefixed keywords in ``quant_kwargs``."""
        context = type(self).__name__
        quants: Dict[str, Optional[type]] = {"input_": input_quant, "output_": output_quant}
        if has_weight:
            quants.update({"weight_": weight_quant, "bias_": bias_quant})
        routed = route_keywords(quant_kwargs, quants, context)
        if not isinstance(return_quant_tensor, bool):
            raise TypeError(f"{context}: return_quant_tensor must be True or False, got {return_quant_tensor!r}")
        self.return_quant_tensor = return_quant_tensor
        self.input_quant = ActQuantProxy(input_quant, "input_", feature_dim, routed["input_"], context)
        self.output_quant = ActQuantProxy(output_quant, "output_", feature_dim, routed["output_"], context)
        if has_weight:
            weight: torch.Tensor = self.weight  # type: ignore[attr-defined]
            bias: Optional[torch.Tensor] = self.bias  # type: ignore[attr-defined]
            self.weight_quant = WeightQuantProxy(weight_quant, weight.shape, routed["weight_"], context)
            if bias is None and (bias_quant is not None or routed["bias_"]):
                raise ValueError(f"{context}: bias_quant / bias_* settings given but the layer has bias=False")
            self.bias_quant = BiasQuantProxy(bias_quant, bias.shape if bias is not None else (0,),
                                             routed["bias_"] if bias is not None else {}, context)
            if weight.device.type != "cpu":  # quantizer state (learned scales, running stats) beside the weight
                for proxy in (self.weight_quant, self.bias_quant, self.input_quant, self.output_quant):
                    proxy.to(weight.device)

    def quant_weight(self) -> Union[torch.Tensor, QuantTensor]:
        """The quantized weight: a quant tensor (``GroupwiseFloatQuantTensor`` for MXFP weights,
        ``GroupwiseIntQuantTensor`` for MXINT8 / int per group, ``Int/FloatQuantTensor`` per tensor
        or channel), or the float weight when ``weight_quant`` is None.

        For export, call it under ``torch.no_grad()``: ``.to_group_quantized()`` gives element
        codes and E8M0 scale codes (contracted), ``.int()`` / ``.codes()`` the element codes.
        """
        return self.weight_quant(self.weight)  # type: ignore[attr-defined]

    def quant_bias(self) -> Union[None, torch.Tensor, QuantTensor]:
        """The quantized bias (quant tensor), the float bias, or None without bias."""
        bias = self.bias  # type: ignore[attr-defined]
        return None if bias is None else self.bias_quant(bias)

    def _lean(self, qx: torch.Tensor, op: GemmOp) -> bool:
        """Whether this call takes the memory-lean path: a training step (grad recorded, not
        traced for export, no autocast) whose weight quantizer lets it (see :func:`lean_applies`)."""
        weight: torch.Tensor = self.weight  # type: ignore[attr-defined]
        if not (self.memory_lean_backward and torch.is_grad_enabled() and (weight.requires_grad or qx.requires_grad)):
            return False
        if torch.jit.is_tracing() or torch.onnx.is_in_onnx_export() or torch.is_autocast_enabled(qx.device.type):
            return False
        return lean_applies(self.weight_quant) and op.lean_supported(qx, weight)

    def _quant_gemm(self, x: Union[torch.Tensor, QuantTensor], op: GemmOp) -> Union[torch.Tensor, QuantTensor]:
        """``output_quant(op(input_quant(x), weight_quant(W), bias_quant(b)))``: one route for
        every weight layer; the lean path differs only in what backward keeps alive."""
        qx = self.input_quant.quant_value(x)
        bias = self.bias  # type: ignore[attr-defined]
        qb = None if bias is None else self.bias_quant.quant_value(bias)
        if self._lean(qx, op):
            y = lean_quant_gemm(qx, self.weight, qb, self.weight_quant, op)  # type: ignore[attr-defined]
        else:
            y = op.forward(qx, plain(self.quant_weight()), qb)
        return self._finish(y)

    def _finish(self, y: torch.Tensor) -> Union[torch.Tensor, QuantTensor]:
        """Apply ``output_quant`` and unwrap unless ``return_quant_tensor``."""
        if self.output_quant.tensor_quant is None:
            return y
        out = self.output_quant(y)
        return out if self.return_quant_tensor else plain(out)
