"""The MX shared scale computed inside an ONNX graph, equal bit for bit to :mod:`groupquant.ops.shared_scale`.

ONNX has no frexp, and a float ``Log`` rounds near powers of two, so ``floor(log2(amax))`` is
taken in two steps: a first guess ``Floor(Log(amax) / ln 2)`` (off by at most one), then an
exact correction by comparing ``amax`` with the guessed power of two and the next one. Powers
of two come from a constant table ``2**k`` for ``k`` in [-150, 128] (``Gather``), exact by
construction, subnormals included (``2**-150`` rounds to 0 and ``2**128`` to Inf in float32,
which the comparisons need). All values are float32 holding exact integers; every comparison,
``Div`` by a power of two and ``Round`` (half to even, as torch.round) is exact.

Exponent scale formats E{k}M0 clamp the exponent to ``[-bias, min(bias, cap)]`` as E8M0 does.
Float-valued scale formats compute ``(amax / max_normal) / g`` (``g`` the per-tensor scale, if
any), clamp it to the format's range and round it onto the format: UE4M3 by ``Cast`` to
FLOAT8E4M3FN (``saturate=1``; onnxruntime rounds to nearest even there, as ml_dtypes and torch do)
and back, bfloat16 by ``Cast`` to BFLOAT16 (nearest even) and back, other unsigned minifloats by
the exact arithmetic of :mod:`.element_round`.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from onnx import TensorProto

from typing import Optional

from ...formats import E8M0, FLOAT32_SCALE, POWER_OF_TWO_RULES, ElementFormat, ScaleFormat
from ...ops.shared_scale import exponent_cap
from .builder import GraphBuilder
from .element_round import round_elements_of

__all__ = ["pow2_table", "exp2_of", "floor_log2_of", "shared_scale_of"]

_TABLE_LOW = -150
_TABLE_HIGH = 128


def pow2_table(b: GraphBuilder) -> str:
    """The float32 constant ``[2**k for k in -150..128]`` (index ``k + 150``), shared per graph."""
    with np.errstate(over="ignore"):  # 2**128 -> inf on purpose
        table = np.ldexp(1.0, np.arange(_TABLE_LOW, _TABLE_HIGH + 1)).astype(np.float32)
    return b.const(table, hint="pow2_table")


def exp2_of(b: GraphBuilder, k: str) -> str:
    """``2**k`` (float32) of a float32 tensor of integers ``k`` in [-150, 128], by table lookup."""
    index = b.node("Cast", [b.node("Sub", [k, b.const(float(_TABLE_LOW))])], to=TensorProto.INT64)
    return b.node("Gather", [pow2_table(b), index], hint="pow2")


def floor_log2_of(b: GraphBuilder, a: str) -> str:
    """``floor(log2(a))`` as exact float32 integers for finite ``a >= 0``, floored at -150 (zero gives -150).

    Subnormal ``a`` may get any value <= -127 in place of its true exponent (<= -127); callers
    clamp the shared exponent to E8M0's -127 afterwards, so that does not change a result.
    """
    guess = b.node("Floor", [b.node("Mul", [b.node("Log", [a]), b.const(float(1.0 / math.log(2.0)))])])
    guess = b.node("Clip", [guess, b.const(float(_TABLE_LOW)), b.const(float(_TABLE_HIGH - 1))])
    low = exp2_of(b, guess)
    high = exp2_of(b, b.node("Add", [guess, b.const(1.0)]))
    too_high = b.node("Cast", [b.node("Greater", [low, a])], to=TensorProto.FLOAT)
    too_low = b.node("Cast", [b.node("LessOrEqual", [high, a])], to=TensorProto.FLOAT)
    return b.node("Add", [b.node("Sub", [guess, too_high]), too_low], hint="floor_log2")


def _significand(b: GraphBuilder, a: str, e_a: str) -> str:
    """``a / 2**e_a`` in [1, 2) (exact division by a power of two)."""
    return b.node("Div", [a, exp2_of(b, e_a)], hint="significand")


def _is_greater(b: GraphBuilder, x: str, threshold: float) -> str:
    """1.0 where ``x > threshold``, else 0.0."""
    return b.node("Cast", [b.node("Greater", [x, b.const(float(threshold))])], to=TensorProto.FLOAT)


def _exponent(b: GraphBuilder, a: str, fmt: ElementFormat, mode: str) -> str:
    """The unclamped shared exponent (float32 integers) of the power-of-two ``mode``."""
    e_a = floor_log2_of(b, a)
    if mode == "floor":
        bump = None
    elif mode == "ceil":
        bump = _is_greater(b, _significand(b, a, e_a), 1.0)
    elif mode == "even":
        steps = b.node("Round", [b.node("Mul", [_significand(b, a, e_a), b.const(float(2 ** fmt.mantissa_bit_width))])])
        bump = b.node("Cast", [b.node("GreaterOrEqual", [steps, b.const(float(2 ** (fmt.mantissa_bit_width + 1)))])],
                      to=TensorProto.FLOAT)
    elif mode == "rceil":
        m_max, e_max = math.frexp(fmt.max_normal)
        bump = _is_greater(b, _significand(b, a, e_a), 2.0 * m_max)
        return b.node("Add", [b.node("Sub", [e_a, b.const(float(e_max - 1))]), bump])
    else:  # float_log2 (microxcaling's float log2) has no exact ONNX form
        raise ValueError(f"ONNX export computes the scale rules {POWER_OF_TWO_RULES}, got scale_mode={mode!r}")
    e = e_a if bump is None else b.node("Add", [e_a, bump])
    return b.node("Sub", [e, b.const(float(fmt.emax))])


def _float_scale(b: GraphBuilder, amax: str, fmt: ElementFormat, sf: ScaleFormat, g: Optional[str]) -> str:
    """``round_sf(clamp((amax / max_normal) / g, min_sf, max_sf))``, 1 where that is 0."""
    scale = b.node("Div", [amax, b.const(float(fmt.max_normal))])
    if g is not None:
        scale = b.node("Div", [scale, g])
    onnx_type = sf.onnx_type  # the scale format's own ONNX type (None: round onto its grid in float32)
    if onnx_type == "FLOAT":
        pass  # amax is finite: (amax / max_normal) / g is in [0, max]
    else:
        scale = b.node("Clip", [scale, b.const(float(sf.min_value)), b.const(float(sf.max_value))])
        if onnx_type is None:
            scale = round_elements_of(b, scale, sf.element)
        else:
            narrow = {"saturate": 1} if onnx_type.startswith("FLOAT8") else {}
            scale = b.node("Cast", [b.node("Cast", [scale], to=getattr(TensorProto, onnx_type), **narrow)],
                           to=TensorProto.FLOAT)
        if sf.min_value > 0:
            return scale  # >= min normal > 0
    positive = b.node("Greater", [scale, b.const(0.0)])
    return b.node("Where", [positive, scale, b.const(1.0)], hint="scale")


def shared_scale_of(b: GraphBuilder, amax: str, fmt: ElementFormat, mode: str,
                    scale_format: Optional[ScaleFormat] = None, tensor_scale: Optional[str] = None) -> str:
    """The float32 shared scale of per-group ``amax`` (finite, >= 0) by ``mode``, as ``group_scale`` computes it.

    Power-of-two modes: ``2**clamp(e, -bias, cap)`` with cap = min(bias, 127 - emax) (float32
    activations, see :func:`groupquant.ops.shared_scale.exponent_cap`; bias 127 for E8M0), an
    all-zero group ``2**-bias``. ``float``: ``(amax / max_normal) / tensor_scale`` in the float
    ``scale_format`` (default float32; see the module doc), 1 where that is 0. ``tensor_scale``
    names a finite float32 scalar (the per-tensor ``g``), or None.
    """
    if scale_format is None:
        scale_format = FLOAT32_SCALE if mode == "float" else E8M0
    if mode == "float":
        if scale_format.is_power_of_two:
            raise ValueError(f"scale_mode='float' cannot give {scale_format.name} scales")
        return _float_scale(b, amax, fmt, scale_format, tensor_scale)
    if not scale_format.is_power_of_two or tensor_scale is not None:
        raise ValueError(f"scale_mode={mode!r} gives power-of-two scales without a tensor scale, not "
                         f"{scale_format.name} scales")
    low = float(scale_format.min_exponent)
    e = _exponent(b, amax, fmt, mode)
    e = b.node("Where", [b.node("Greater", [amax, b.const(0.0)]), e, b.const(low)])
    e = b.node("Clip", [e, b.const(low), b.const(float(exponent_cap(torch.float32, fmt, scale_format)))])
    return exp2_of(b, e)
