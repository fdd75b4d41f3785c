"""The memory-lean configuration of a quant layer's GEMM (:mod:`groupquant.nn.gemm.backward_gemm`).

``F.linear(xq, Wq, b)`` through plain autograd keeps the quantized weight ``Wq`` (a second
weight-sized float tensor) alive until the whole backward of the layer has run, so it coexists
with the weight gradient: peak memory ~ ``W + Wq + dW``, against ``W + dW`` for a float layer.
:func:`lean_quant_gemm` computes the same forward with ``Wq`` from the layer's own weight proxy
(the same spec and module as the plain path) through the one quant-GEMM autograd function,
configured straight through: backward uses ``Wq`` for the input gradient first, then frees it
before the weight gradient (a linear layer writes the weight gradient into ``Wq``'s buffer: no
fresh allocation, whose first touch of new pages costs about as much as the fake-quant kernel
itself on a CPU). Same GEMMs, same operands: outputs and gradients equal the plain path bit for bit.

With ``keep_quantized_weight=False`` (a layer's ``recompute_quantized_weight``) the backward makes
``Wq`` again from the saved float weight instead of keeping it from the forward: nothing
weight-sized stays alive between the forward and the backward (a deep network's quantized copy of
its weights at the end of the forward), for one more weight fake-quant; the bits are the same (the
quantizer is dynamic: the same weight gives the same ``Wq``), and a second backward
(``retain_graph=True``) works.

It applies where the weight's gradient is the straight-through identity: a dynamic (abs-max,
MX) weight quantizer with ``ste='identity'`` (:func:`lean_applies`); any other weight quantizer
(learned or running scales, the clipped STE) takes the plain path.
"""
from __future__ import annotations

from typing import Optional

import torch

from ...proxy import WeightQuantProxy
from .backward_gemm import GemmBackward, quant_gemm
from .gemm_op import LINEAR, GemmOp

__all__ = ["lean_quant_gemm", "lean_applies"]


def lean_applies(weight_quant: WeightQuantProxy) -> bool:
    """Whether a weight proxy lets :func:`lean_quant_gemm` replace the plain path."""
    spec = weight_quant.spec
    return spec is not None and spec.is_dynamic and spec.ste == "identity"


def lean_quant_gemm(xq: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                    weight_quant: WeightQuantProxy, op: GemmOp = LINEAR,
                    keep_quantized_weight: bool = True) -> torch.Tensor:
    """``op(xq, weight_quant.quant_value(weight), bias)`` with the memory-lean backward above.

    ``xq``: the (already quantized) input; ``weight``: the float weight; ``weight_quant``: a proxy
    for which :func:`lean_applies` holds; ``keep_quantized_weight``: keep ``Wq`` from the forward
    for the backward (False: the backward makes it again from ``weight``, the same bits).
    """
    plan = GemmBackward(op, weight_quant=weight_quant, keep_quantized_weight=keep_quantized_weight)
    return quant_gemm(xq, weight, bias, xq, weight, plan)
