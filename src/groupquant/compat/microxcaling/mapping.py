"""How microxcaling's setting values map onto groupquant's: element formats (its names are
groupquant's, plus the alias ``fp4``; its intN, sign-magnitude 1.(N-2) fixed point, are groupquant's
symmetric intN), round modes (its ``dither`` is ``stochastic``), the element-wise precision and
rounding kit (:class:`groupquant.elementwise.RoundedMath`), and the scale rule, scale format and
block of its shared exponent.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import torch

from ...formats import ElementFormat, ExponentScale, get_format
from ...elementwise.rounded_math import RoundedMath
from ...ops.precision import ElementPrecision, resolve_precision
from .specs import apply_mx_specs, get_backwards_mx_specs

__all__ = ["MX_ELEM_FORMATS", "elem_format", "mx_rounding", "element_precision", "rounding_kit",
           "rounded", "scale_format", "scale_rule", "group_size"]

#: microxcaling's MX element formats (groupquant's names), and its one alias
MX_ELEM_FORMATS = ("fp8_e5m2", "fp8_e4m3", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1", "int8", "int4", "int2")
_ALIASES = {"fp4": "fp4_e2m1"}
_NOT_PROVIDED = ("fp16", "float16", "bf16", "bfloat16")
_MX_ROUNDINGS = {"nearest": "nearest", "even": "even", "floor": "floor", "dither": "stochastic"}
_ELEMENT_ROUNDINGS = ("nearest", "even", "floor")


def elem_format(name: Any, setting: str = "elem_format") -> Optional[ElementFormat]:
    """The groupquant format for microxcaling's element-format name (None, '' or 0: no quantization).

    ValueError naming ``setting`` for an unknown or unprovided name."""
    if not name:
        return None
    key = str(getattr(name, "name", name)).lower()  # microxcaling's ElemFormat enum members too
    if _ALIASES.get(key, key) in MX_ELEM_FORMATS:
        return get_format(_ALIASES.get(key, key))
    if key in _NOT_PROVIDED:
        raise ValueError(f"mx_specs {setting}={name!r}: MX blocks of {key} elements are not provided by "
                         "groupquant; use bfloat=16 / fp=16 for element-wise rounding")
    raise ValueError(f"mx_specs {setting}={name!r} is not an MX element format; use one of "
                     f"{', '.join(MX_ELEM_FORMATS + tuple(_ALIASES))}")


def scale_format(scale_bits: int, flush_fp32_subnorms: bool = False,
                 float_log2: bool = False) -> Optional[ExponentScale]:
    """microxcaling's ``scale_bits`` k (0: 8) and ``mx_flush_fp32_subnorms`` as a scale format: E{k}M0
    whose blocks above its largest exponent are NaN (not saturated), as microxcaling's shared
    exponent is, flushing blocks whose max is a float32 subnormal to zero when asked; None (E8M0)
    for 8 bits without the flush, unless ``float_log2`` (whose exponent can pass E8M0's top).
    ValueError naming ``scale_bits`` unless k is 0 or an int in 2..8."""
    if isinstance(scale_bits, bool) or not isinstance(scale_bits, int) or not (scale_bits == 0 or 2 <= scale_bits <= 8):
        raise ValueError(f"mx_specs scale_bits={scale_bits!r}: use 0 (8) or an int in 2..8")
    bits = scale_bits or 8
    if bits == 8 and not flush_fp32_subnorms and not float_log2:
        return None
    return ExponentScale(bits, saturating=False, flush_subnormal_blocks=bool(flush_fp32_subnorms))


def scale_rule(mx_specs: Mapping[str, Any]) -> str:
    """The scale rule of ``mx_specs``: ``float_log2`` (microxcaling's float-log2 exponent) with
    ``shared_exp_from_float_log2``, else OCP's exact ``floor``."""
    return "float_log2" if mx_specs.get("shared_exp_from_float_log2") else "floor"


def group_size(mx_specs: Mapping[str, Any], block_size: Optional[int] = None) -> int:
    """Elements per shared exponent: 1 for ``shared_exp_method='none'``, else ``block_size`` (None:
    ``mx_specs['block_size']``; 0: the whole axis). ValueError naming the setting for a bad value."""
    method = mx_specs.get("shared_exp_method", "max")
    if method == "none":
        return 1
    if method != "max":
        raise ValueError(f"mx_specs shared_exp_method={method!r}: use 'max' or 'none'")
    size = mx_specs["block_size"] if block_size is None else block_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"mx_specs block_size={size!r}: use a block size > 0 (or 0: the whole axis)")
    return size


def mx_rounding(round: str, setting: str = "round") -> str:
    """groupquant's rounding mode for microxcaling's MX round mode (ValueError naming ``setting``)."""
    if round not in _MX_ROUNDINGS:
        raise ValueError(f"mx_specs {setting}={round!r}: use one of {', '.join(_MX_ROUNDINGS)}")
    return _MX_ROUNDINGS[round]


def element_precision(mx_specs: Mapping[str, Any], round: Optional[str] = None,
                      setting: str = "round") -> Optional[ElementPrecision]:
    """The element-wise precision of ``mx_specs`` (``bfloat`` / ``fp``) with ``round`` (default
    ``mx_specs['round']``); None when both are 0. ValueError naming the setting for a bad value."""
    if round is None:
        round, setting = mx_specs["round"], "round"
    if not mx_specs.get("bfloat") and not mx_specs.get("fp"):
        return None
    if round not in _ELEMENT_ROUNDINGS:
        raise ValueError(f"mx_specs {setting}={round!r}: element-wise (bfloat/fp) rounding is one of "
                         f"{', '.join(_ELEMENT_ROUNDINGS)}")
    return ElementPrecision.from_mx_specs(bfloat=mx_specs.get("bfloat", 0), fp=mx_specs.get("fp", 0),
                                          bfloat_subnorms=bool(mx_specs.get("bfloat_subnorms", True)),
                                          round=round)


_BFLOAT16 = resolve_precision("bfloat16")


def rounding_kit(mx_specs: Optional[Mapping[str, Any]], round: Optional[str] = None,
                 gradient: bool = True) -> RoundedMath:
    """microxcaling's vector arithmetic of ``mx_specs`` (over the defaults) as groupquant's rounding
    kit: every step rounded to the ``bfloat`` / ``fp`` precision with ``round`` (default
    ``mx_specs['round']``; none when both are 0), library functions and sums in float32 (torch's
    kernels, as microxcaling), ``a / b`` as ``a * q(1 / b)`` with ``vec_use_recip``, ``e**x`` as
    ``2**q(x log2 e)`` with ``vec_use_exp2``, constants rounded to bfloat16 (microxcaling's
    ``log2(e)``, ``ln 2``), microxcaling's formulas where its ops differ; with ``gradient``, the
    gradient kit of the backward specs."""
    specs = apply_mx_specs(mx_specs)
    grad = rounding_kit(get_backwards_mx_specs(specs), round, gradient=False) if gradient else None
    return RoundedMath(element_precision(specs, round, setting="round"), library="float32", accumulate="float32",
                       division="reciprocal" if specs["vec_use_recip"] else "divide",
                       exp_via_exp2=bool(specs["vec_use_exp2"]), constants=_BFLOAT16, formulas="microxcaling",
                       grad=grad)


def rounded(op: Callable[..., torch.Tensor], input: torch.Tensor, mx_specs: Optional[Mapping[str, Any]],
            *args: Any, **kwargs: Any) -> torch.Tensor:
    """``op(input, *args, precision=kit, **kwargs)`` of :mod:`groupquant.elementwise` with the kit of
    ``mx_specs`` (:func:`rounding_kit`), in ``input``'s dtype."""
    return op(input, *args, precision=rounding_kit(mx_specs), **kwargs).to(input.dtype)
