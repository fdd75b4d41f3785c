"""``mx_specs``: microxcaling's settings (:data:`SETTINGS`) and its functions of them, with the same names and
behaviour; the keys and what each sets in groupquant: ``docs/compat-microxcaling.md``.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict, Mapping, Optional, Tuple

from ...inject import UnknownSettingError, closest

__all__ = ["MxSpecs", "UnknownMxSpecError", "get_default_mx_specs", "apply_mx_specs", "finalize_mx_specs",
           "get_backwards_mx_specs", "add_mx_args", "get_mx_specs"]

_FMT = "MX element format: fp8_e5m2, fp8_e4m3, fp6_e3m2, fp6_e2m3, fp4_e2m1 (fp4), int8, int4, int2"
_MX_ROUND = "MX element rounding (nearest, even, floor, dither) of "

#: Every setting: (microxcaling's default, the setting it follows when unset, help). A follower
#: comes after its base, so :func:`finalize_mx_specs` fills them in this order.
SETTINGS: Dict[str, Tuple[Any, Optional[str], str]] = {
    "scale_bits": (0, None, "bits of the shared exponent (0 means 8: E8M0)"),
    "w_elem_format": (None, None, "weights, forward GEMM. " + _FMT),
    "a_elem_format": (None, None, "activations, forward GEMM. " + _FMT),
    "w_elem_format_bp": (None, "w_elem_format", "weights in the grad-input GEMM"),
    "a_elem_format_bp": (None, "a_elem_format", "saved inputs in the grad-weight GEMM"),
    "a_elem_format_bp_ex": (None, "a_elem_format", "output gradients in the grad-weight GEMM"),
    "a_elem_format_bp_os": (None, "a_elem_format", "output gradients in the grad-input GEMM"),
    "mx_flush_fp32_subnorms": (False, None, "zero MX blocks whose max is an fp32 subnormal"),
    "shared_exp_method": ("max", None, "'max': one shared exponent per block; 'none': one per element"),
    "block_size": (0, None, "elements per shared exponent (0: the whole reduction dim)"),
    "bfloat": (0, None, "element-wise precision bfloatN (8 exponent bits, N-9 mantissa bits); 0: off"),
    "fp": (0, None, "element-wise precision fpN (5 exponent bits, N-6 mantissa bits); 0: off"),
    "bfloat_subnorms": (True, None, "keep subnormals in the bfloat/fp precision (False: flush them)"),
    "quantize_backprop": (True, None, "quantize the backward pass too"),
    "round": ("nearest", None, "element-wise rounding: nearest (ties away), even, floor (toward zero)"),
    "round_m": ("nearest", "round", "optimizer rounding (accepted, not used by any layer)"),
    "round_weight": ("nearest", "round", "element-wise rounding of weights and biases"),
    "round_output": ("nearest", "round", "element-wise rounding of inputs and outputs"),
    "round_grad_weight": ("nearest", "round", "element-wise rounding of weight and bias gradients"),
    "round_grad_input": ("nearest", "round", "element-wise rounding of input and output gradients"),
    "round_mx_output": ("nearest", "round", _MX_ROUND + "the forward GEMM's operands"),
    "round_mx_input_grad_input": ("nearest", "round_grad_input", _MX_ROUND + "saved inputs (matmul backward)"),
    "round_mx_weight_grad_input": ("nearest", "round_grad_input", _MX_ROUND + "weights in the grad-input GEMM"),
    "round_mx_grad_output_grad_input": ("nearest", "round_grad_input", _MX_ROUND + "dY in the grad-input GEMM"),
    "round_mx_input_grad_weight": ("nearest", "round_grad_input", _MX_ROUND + "inputs in the grad-weight GEMM"),
    "round_mx_grad_output_grad_weight": ("nearest", "round_grad_input", _MX_ROUND + "dY in the grad-weight GEMM"),
    "softmax_exp2": (False, None, "softmax takes 2**x instead of e**x"),
    "vec_use_exp2": (False, None, "e**x computed as 2**(x * log2(e) in bfloat16)"),
    "vec_use_recip": (False, None, "a / b computed as a * (1 / b)"),
    "custom_cuda": (False, None, "accepted, no effect: groupquant picks its kernel or reference (same bits)"),
    "shared_exp_from_float_log2": (False, None, "groupquant's: microxcaling's float-log2 shared exponent"),
}
DEFAULTS: Dict[str, Any] = {key: default for key, (default, _, _) in SETTINGS.items()}
HELP: Dict[str, str] = {key: text for key, (_, _, text) in SETTINGS.items()}
ELEM_FORMAT_KEYS = tuple(key for key in SETTINGS if "elem_format" in key)
#: ``mx_specs`` as the ops take it: settings over the defaults, or None (the plain torch op)
Specs = Optional[Mapping[str, Any]]


class UnknownMxSpecError(UnknownSettingError, KeyError):
    """A key that is no mx_specs setting (a ``KeyError``, as in microxcaling, with a did-you-mean)."""

    def __str__(self) -> str:
        return self.problem


def _unknown(key: object) -> UnknownMxSpecError:
    """The error for an unknown key, naming the closest setting."""
    match = closest(str(key), DEFAULTS)
    hint = f"; did you mean {match!r}?" if match else "; see groupquant.compat.microxcaling.specs.DEFAULTS"
    return UnknownMxSpecError(str(key), f"unknown mx_specs key {key!r}{hint}", match)


class MxSpecs(dict):
    """microxcaling's settings as a dict: every key present (unset ones at the default); an unknown key, at
    construction or on assignment, raises :class:`UnknownMxSpecError`."""

    help_strings = HELP

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(DEFAULTS)
        self.update(*args, **kwargs)

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in DEFAULTS:
            raise _unknown(key)
        super().__setitem__(key, value)

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """``dict.update`` with the key check."""
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        """``dict.setdefault`` with the key check."""
        if key not in DEFAULTS:
            raise _unknown(key)
        return super().setdefault(key, default)

    def copy(self) -> "MxSpecs":  # type: ignore[override]
        """A shallow copy that stays an :class:`MxSpecs`."""
        return MxSpecs(self)

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.items() if DEFAULTS.get(k, object()) != v}
        return f"MxSpecs({changed!r})"


def get_default_mx_specs() -> MxSpecs:
    """Every setting at its default (which quantizes nothing)."""
    return MxSpecs()


def apply_mx_specs(mx_specs: Specs, default_mx_specs: Optional[MxSpecs] = None) -> MxSpecs:
    """``default_mx_specs`` (or the defaults) overridden by the entries of ``mx_specs`` that are not None."""
    out = default_mx_specs if default_mx_specs else get_default_mx_specs()
    if not mx_specs:
        return out
    for key, value in mx_specs.items():
        if value is not None:
            out[key] = value
    return out


_ACTIVE = ELEM_FORMAT_KEYS + ("bfloat", "fp")


def finalize_mx_specs(specs: Dict[str, Any], early_exit: bool = True) -> Optional[MxSpecs]:
    """microxcaling's ``finalize_mx_specs``, in place: a key absent or None takes the value of the setting it
    follows (:data:`SETTINGS`), then the defaults; None when nothing quantizes and ``early_exit``. An unknown
    key raises :class:`UnknownMxSpecError` first (a misspelling never reads as "quantize nothing"). Pass a
    plain dict: an :class:`MxSpecs` holds every key at its default already, so none of its keys follow."""
    for key in specs:
        if key not in DEFAULTS:
            raise _unknown(key)
    if early_exit and not any(specs.get(k) for k in _ACTIVE):
        return None
    for key, (_, base, _) in SETTINGS.items():
        if base is not None and specs.get(key) is None and base in specs:
            specs[key] = specs[base]
    return apply_mx_specs(specs, get_default_mx_specs())


def get_backwards_mx_specs(specs: Mapping[str, Any]) -> MxSpecs:
    """A copy of ``specs``; with ``quantize_backprop`` False, one that quantizes nothing."""
    out = MxSpecs(specs)
    if out["quantize_backprop"] is False:
        out.update(dict.fromkeys(ELEM_FORMAT_KEYS), block_size=0, bfloat=0, fp=0)
    return out


def add_mx_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """microxcaling's ``add_mx_args``: one option per setting (group ``mx``; ``--key`` for a False default,
    ``--no_key`` for a True one), ``--mx_dir`` (unused) and ``--skip_early_exit``."""
    group = parser.add_argument_group("mx", "MX specs")
    group.add_argument("--mx_dir", type=str, default=None, help="accepted for compatibility; unused")
    for key, default in DEFAULTS.items():
        if default is False:
            group.add_argument("--" + key, action="store_true", help=HELP[key])
        elif default is True:
            group.add_argument("--no_" + key, action="store_true", help=HELP[key])
        else:  # unset (None) unless given: finalize_mx_specs fills it
            group.add_argument("--" + key, type=str if default is None else type(default), default=None, help=HELP[key])
    group.add_argument("--skip_early_exit", action="store_true", default=False,
                       help="return specs even when nothing quantizes")
    return parser


def get_mx_specs(parsed_args: argparse.Namespace) -> Optional[MxSpecs]:
    """The finalized specs from ``parser.parse_args()`` of a parser given to :func:`add_mx_args`."""
    parsed: Dict[str, Any] = {}
    for key, default in DEFAULTS.items():
        if default is True:
            if hasattr(parsed_args, "no_" + key):
                parsed[key] = not getattr(parsed_args, "no_" + key)
        elif hasattr(parsed_args, key):
            parsed[key] = getattr(parsed_args, key)
    early_exit = not getattr(parsed_args, "skip_early_exit", False)
    return finalize_mx_specs(parsed, early_exit=early_exit)
