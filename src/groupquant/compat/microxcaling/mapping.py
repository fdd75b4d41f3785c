"""microxcaling's setting values as groupquant's: element formats, round modes, the element-wise rounding
kit, and the scale rule, scale format and block of its shared exponent (``docs/compat-microxcaling.md``).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from torch import Tensor

from ...formats import ElementFormat, ExponentScale, get_format
from ...elementwise.rounded_math import RoundedMath
from ...ops.precision import ElementPrecision, resolve_precision
from .specs import Specs, apply_mx_specs, get_backwards_mx_specs

__all__ = ["MX_ELEM_FORMATS", "elem_format", "mx_rounding", "element_precision", "rounding_kit",
           "rounded", "scale_format", "group_size"]

#: microxcaling's MX element formats (groupquant's names), and its one alias
MX_ELEM_FORMATS = ("fp8_e5m2", "fp8_e4m3", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1", "int8", "int4", "int2")
_ALIASES = {"fp4": "fp4_e2m1"}
_NOT_PROVIDED = ("fp16", "float16", "bf16", "bfloat16")
_MX_ROUNDINGS = {"nearest": "nearest", "even": "even", "floor": "floor", "dither": "stochastic"}
_ELEMENT_ROUNDINGS = ("nearest", "even", "floor")


def elem_format(name: Any, setting: str = "elem_format") -> Optional[ElementFormat]:
    """The groupquant format of microxcaling's element format ``name`` (falsy: None); ValueError naming ``setting``."""
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
    """``scale_bits`` k (0: 8) as the scale format E{k}M0, NaN above its top as microxcaling's, flushing blocks
    with a float32-subnormal max when asked; None (OCP E8M0) for k=8 with neither flush nor ``float_log2``."""
    if isinstance(scale_bits, bool) or not isinstance(scale_bits, int) or not (scale_bits == 0 or 2 <= scale_bits <= 8):
        raise ValueError(f"mx_specs scale_bits={scale_bits!r}: use 0 (8) or an int in 2..8")
    bits = scale_bits or 8
    if bits == 8 and not flush_fp32_subnorms and not float_log2:
        return None
    return ExponentScale(bits, saturating=False, flush_subnormal_blocks=bool(flush_fp32_subnorms))


def group_size(mx_specs: Mapping[str, Any], block_size: Optional[int] = None) -> int:
    """Elements per shared exponent: 1 for ``shared_exp_method='none'``, else ``block_size`` (None: the one of
    ``mx_specs``; 0: the whole axis); ValueError naming the setting."""
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
    """The ``bfloat`` / ``fp`` precision of ``mx_specs`` with ``round`` (None: ``mx_specs['round']``), or None."""
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


def rounding_kit(mx_specs: Specs, round: Optional[str] = None, gradient: bool = True) -> RoundedMath:
    """microxcaling's vector arithmetic of ``mx_specs`` as groupquant's rounding kit (each setting it reads:
    ``docs/compat-microxcaling.md``), with the gradient kit of the backward specs when ``gradient``."""
    specs = apply_mx_specs(mx_specs)
    grad = rounding_kit(get_backwards_mx_specs(specs), round, gradient=False) if gradient else None
    return RoundedMath(element_precision(specs, round, setting="round"), library="float32", accumulate="float32",
                       division="reciprocal" if specs["vec_use_recip"] else "divide",
                       exp_via_exp2=bool(specs["vec_use_exp2"]), constants=_BFLOAT16, formulas="microxcaling",
                       grad=grad)


def rounded(op: Callable[..., Tensor], input: Tensor, mx_specs: Specs, *args: Any, **kwargs: Any) -> Tensor:
    """The :mod:`groupquant.elementwise` ``op`` of ``input`` with the kit of ``mx_specs``, in ``input``'s dtype."""
    return op(input, *args, precision=rounding_kit(mx_specs), **kwargs).to(input.dtype)
