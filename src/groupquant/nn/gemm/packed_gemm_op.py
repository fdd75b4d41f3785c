"""PackedGemmOp: the GEMM of a quant layer whose weight is packed storage (``PackedLinear``).

A :class:`~groupquant.nn.gemm.gemm_op.GemmOp` whose weight operand is a
:class:`~groupquant.ops.packed_gemm.PackedWeight` (element codes, scale bytes, tables, record) that
the packed kernel decodes inside the GEMM (:func:`groupquant.ops.packed_gemm.packed_linear`). The
weight is stored quantized (``stores_weight``), so the quant-layer route
(:meth:`groupquant.nn.QuantLayerMixin._quant_gemm`) gives it to the op as it is: no weight
quantizer, no eval cache, no lean or quantized backward. Everything else (online rotation,
input / bias / output quantizers, the return-quant-tensor tail) runs on that route as for any
quant layer.

Backward: the input gets its gradient ``dY @ W`` (``W`` decoded to float32, float32 accumulation,
cast to the input's dtype); the packed weight gets none (its codes are integers;
``groupquant.unpack_model`` gives trainable layers back). Gradients so flow through a frozen packed
base to what lies before it (adapters, prompts, inputs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

import torch

from ...ops.packed_gemm import PACKED_INPUT_DTYPES, PackedWeight, packed_decode, packed_linear
from .gemm_op import GemmOp, autocast_enabled

__all__ = ["PackedGemmOp", "packed_linear_with_input_grad"]


class _PackedLinearInputGrad(torch.autograd.Function):
    """``packed_linear(x, w, b)`` whose backward is ``dY @ decode(w)`` for ``x`` (nothing else)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: PackedWeight,  # type: ignore[override]
                bias: Optional[torch.Tensor]) -> torch.Tensor:
        ctx.weight = weight
        ctx.input_dtype = x.dtype
        return packed_linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        w = packed_decode(ctx.weight)  # float32 [N, K]: element * block scale (* tensor scale)
        return (grad.float() @ w).to(ctx.input_dtype), None, None


def packed_linear_with_input_grad(x: torch.Tensor, weight: PackedWeight,
                                  bias: Optional[torch.Tensor]) -> torch.Tensor:
    """``x @ W^T + bias`` from packed storage; when ``x`` needs a gradient (grad mode on), its
    backward computes ``dY @ W`` (see the module docstring), else the plain packed GEMM runs."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _PackedLinearInputGrad.apply(x, weight, bias)
    return packed_linear(x, weight, bias)


@dataclass(frozen=True)
class PackedGemmOp(GemmOp):
    """``linear`` on a packed weight: ``x @ W^T + b`` with ``W`` decoded inside the kernel.

    ``layer_name`` names the layer in the error for an input dtype the kernel does not take
    (float32, bfloat16 and float16 only: :data:`~groupquant.ops.packed_gemm.PACKED_INPUT_DTYPES`).
    The bias is added in float32 (the kernel's accumulation); the output has the input's dtype.
    Under ``torch.autocast`` for the input's device, the input is first cast to autocast's dtype,
    as torch's ``linear`` does there (so a packed layer gives what its quant layer gives under
    autocast: output in that dtype; a float32 model under bfloat16 autocast takes the bfloat16
    kernels).
    """

    #: the weight operand is quantized storage the op decodes itself (see the module docstring)
    stores_weight: ClassVar[bool] = True

    kind: str = "packed"
    layer_name: str = "PackedLinear"

    def forward(self, x: torch.Tensor, w: PackedWeight, b: Optional[torch.Tensor]) -> torch.Tensor:  # type: ignore[override]
        """The packed GEMM of the quantized input ``x [..., in]`` (TypeError naming the layer for
        another dtype) with the packed weight and the quantized bias ``b`` (or None); under
        autocast, ``x`` in autocast's dtype."""
        if autocast_enabled(x.device.type) and x.is_floating_point():
            x = x.to(torch.get_autocast_dtype(x.device.type))
        if x.dtype not in PACKED_INPUT_DTYPES:
            raise TypeError(f"{self.layer_name}: packed inference takes input of dtype "
                            f"{[str(d) for d in PACKED_INPUT_DTYPES]}, got {x.dtype}")
        return packed_linear_with_input_grad(x, w, None if b is None else b.float())

    def lean_supported(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        """Never: the packed weight has no gradient, so there is no weight backward to make lean."""
        return False
