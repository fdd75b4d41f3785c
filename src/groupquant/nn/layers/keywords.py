"""Routing a layer's extra keywords to its quantizers by prefix (``weight_bit_width=4``)."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from ...inject import UnknownSettingError, closest, known_settings
from ..gemm.grad_slots import GEMM_ONLY_KEYWORDS

__all__ = ["route_keywords", "route_act_keywords", "resolve_act_quant", "UNSET"]

#: Names other libraries use for a layer argument, and groupquant's name for it.
_ALIASES = {"act_quant": "output_quant", "return_quant_tensors": "return_quant_tensor"}


def route_keywords(kwargs: Mapping[str, Any], quants: Mapping[str, Optional[type]],
                   context: str) -> Dict[str, Dict[str, Any]]:
    """Split ``kwargs`` by the prefixes of ``quants`` (``'weight_'``, ``'input_'``, ...), prefix
    stripped. A keyword with none of the prefixes is a ValueError naming it, with the closest
    prefixed setting of the layer's quantizers suggested."""
    routed: Dict[str, Dict[str, Any]] = {prefix: {} for prefix in quants}
    for key, given in kwargs.items():
        prefix = next((p for p in sorted(quants, key=len, reverse=True) if key.startswith(p)), None)
        if prefix is not None:
            routed[prefix][key[len(prefix):]] = given
            continue
        candidates = sorted(p + name for p, q in quants.items() if q is not None
                            for name in known_settings(q) if not name.startswith("_"))
        candidates += [p + "quant" for p in quants]
        match = [_ALIASES[key]] if key in _ALIASES else [m for m in (closest(key, candidates),) if m is not None]
        hint = (f"; did you mean {match[0]!r}?" if match else
                f"; quantizer settings take a prefix: {', '.join(p + '...' for p in quants)}")
        raise UnknownSettingError(key, f"{context} got unknown keyword {key!r}{hint}", match[0] if match else None)
    return routed


class _Unset:
    """The default of ``act_quant``: tells "not given" from an explicit None."""

    def __repr__(self) -> str:
        return "<unset>"


#: Marks an ``act_quant`` argument the caller did not give.
UNSET: Any = _Unset()

#: Layer arguments of QuantIdentity / QuantReLU, offered as did-you-mean candidates.
_ACT_LAYER_ARGS = ("act_quant", "input_quant", "output_quant", "return_quant_tensor", "feature_dim", "inplace")


def resolve_act_quant(act_quant: Any, output_quant: Optional[type], context: str) -> Optional[type]:
    """The output quantizer of an activation layer given Brevitas's ``act_quant`` or groupquant's
    ``output_quant`` (the same slot: the quantizer after the activation). Both given is a ValueError."""
    if act_quant is UNSET:
        return output_quant
    if output_quant is not None:
        raise ValueError(f"{context} got both act_quant={act_quant!r} and output_quant={output_quant!r}; they are "
                         f"the same slot (the quantizer after the activation): give one of them")
    return act_quant


def _act_setting(key: str) -> Optional[str]:
    """The act quantizer's setting a Brevitas-style keyword names: ``act_bit_width`` and the
    unprefixed ``bit_width`` both name ``bit_width``; None for ``input_`` / ``output_`` keywords."""
    if key.startswith(("input_", "output_")):
        return None
    return key[len("act_"):] if key.startswith("act_") else key


def gemm_only_error(key: str, context: str) -> Optional[UnknownSettingError]:
    """The error for a backward-GEMM keyword given to a layer without a GEMM (or None)."""
    if not key.startswith(GEMM_ONLY_KEYWORDS):  # (the backward slots: elsewhere, their own message)
        return None
    return UnknownSettingError(key, f"{context} runs no GEMM, so it has no gradient quantizers: {key!r} belongs to "
                                    "QuantLinear, QuantConv1d / QuantConv2d (grad_output_quant, ...) or QuantMatMul")


def _unknown_act_keyword(key: str, setting: str, input_quant: Optional[type], act_quant: Optional[type],
                         context: str) -> UnknownSettingError:
    """The error for a keyword meant for the act quantizer that it does not know (or that has none)."""
    gemm_only = gemm_only_error(key, context)
    if gemm_only is not None:
        return gemm_only
    act_known = sorted(n for n in known_settings(act_quant) if not n.startswith("_")) if act_quant else []
    input_known = sorted("input_" + n for n in known_settings(input_quant) if not n.startswith("_")) \
        if input_quant is not None else []
    prefix = key[: len(key) - len(setting)]
    candidates = [prefix + n for n in act_known] + input_known + list(_ACT_LAYER_ARGS)
    match = ([_ALIASES[key]] if key in _ALIASES and _ALIASES[key] in _ACT_LAYER_ARGS
             else [m for m in (closest(key, candidates),) if m is not None])
    if match:
        message = f"{context} got unknown keyword {key!r}; did you mean {match[0]!r}?"
    elif act_quant is None:
        message = (f"{context} got keyword {key!r}, which sets the act quantizer, but no act_quant / "
                   f"output_quant is given")
    else:
        message = (f"{context} got unknown keyword {key!r}; settings of {act_quant.__name__}: "
                   f"{', '.join(act_known)}")
    return UnknownSettingError(key, message, match[0] if match else None)


def route_act_keywords(kwargs: Mapping[str, Any], input_quant: Optional[type], act_quant: Optional[type],
                       context: str) -> Dict[str, Any]:
    """An activation layer's keywords (QuantIdentity, QuantReLU) in groupquant's prefixed form.

    As Brevitas's quantized activations do, a keyword without a prefix sets the act quantizer
    (``bit_width=4``); ``act_bit_width=4`` and ``output_bit_width=4`` say the same, and
    ``input_*`` keywords reach the input quantizer. Unprefixed and ``act_`` keywords become
    ``output_*``; each is checked here against the act quantizer's settings, so an unknown one is
    an :class:`UnknownSettingError` naming the keyword as typed, with a did-you-mean. The same
    setting given twice (``bit_width=4, output_bit_width=8``) is a ValueError.
    """
    routed: Dict[str, Any] = {}
    origin: Dict[str, str] = {}
    for key, given in kwargs.items():
        setting = _act_setting(key)
        if setting is None:
            target = key
        elif act_quant is not None and setting in known_settings(act_quant) and not setting.startswith("_"):
            target = "output_" + setting
        else:
            raise _unknown_act_keyword(key, setting, input_quant, act_quant, context)
        if target in routed:
            raise ValueError(f"{context} got {origin[target]!r} and {key!r}, which set the same quantizer setting; "
                             f"give one of them")
        routed[target], origin[target] = given, key
    return routed
