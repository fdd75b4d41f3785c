"""The one check of a scale set-up: scale format, rule, source, statistic, tensor scale, granularity.

Both vocabularies call it: the ops (``scale_mode``, ``scale_format``, ``tensor_scale`` of
:func:`groupquant.fake_quant`) through :data:`OPS_SETTINGS`, the quantizers (``restrict_scaling_type``,
``scale_rounding``, ``scaling_source`` ...) through :data:`QUANTIZER_SETTINGS`; an error is a
:class:`ScaleSetupError` (a ValueError) that names the setting the user wrote. What a scale format
accepts is read off the format itself (``rules``, ``default_rule``, ``takes_tensor_scale``,
``any_scale_source``), so a new scale format needs nothing here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from .scale import E8M0, FLOAT32_SCALE, SCALE_RULES, ScaleFormat

__all__ = ["ScaleSetupError", "SettingNames", "OPS_SETTINGS", "QUANTIZER_SETTINGS", "check_scale_setup",
           "default_scale_format"]


class ScaleSetupError(ValueError):
    """A scale set-up no kernel implements; ``setting`` is the user's name of the setting at fault."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting


@dataclass(frozen=True)
class SettingNames:
    """How the caller's users spell each part of a scale set-up (used in error messages)."""

    format: str
    rule: str
    restrict: str
    tensor_scale: str
    source: str
    statistic: str
    granularity: str


OPS_SETTINGS = SettingNames("scale_format", "scale_mode", "scale_mode", "tensor_scale", "scale_source", "stats_op",
                            "granularity")
QUANTIZER_SETTINGS = SettingNames("scale_format", "scale_rounding", "restrict_scaling_type", "tensor_scale",
                                  "scaling_source", "scaling_stats_op", "scaling_per_output")


def default_scale_format(rule: Optional[str]) -> ScaleFormat:
    """The scale format a rule implies when none is named: float32 for ``'float'``, else E8M0."""
    return FLOAT32_SCALE if rule == "float" else E8M0


def _check_rule(sf: ScaleFormat, rule: Optional[str], restrict: Optional[str], names: SettingNames) -> str:
    """The rule for ``sf``: the one asked for, checked against what the format can store, or its default."""
    if restrict is None:  # the ops' vocabulary: one setting, scale_mode
        if rule is None:
            return sf.default_rule
        if rule not in SCALE_RULES:
            raise ScaleSetupError(names.rule, f"{names.rule} must be one of {SCALE_RULES}, got {rule!r}")
        if rule in sf.rules:
            return rule
        if sf.is_power_of_two:
            raise ScaleSetupError(names.rule, (
                f"{names.rule}='float' computes amax / max_normal, which {names.format}={sf.name!r} (powers of two "
                "only) cannot store; use a power-of-two rule (floor, ceil, even, rceil) or scale_format='float32' / "
                "'ue4m3'"))
        raise ScaleSetupError(names.rule, (
            f"{names.rule}={rule!r} is a power-of-two rule for exponent scale formats (e8m0, e{{k}}m0); "
            f"{names.format}={sf.name!r} holds float scales: use {names.rule}='float' (or leave it unset)"))
    # the quantizers' vocabulary: restrict_scaling_type (fp / power_of_two) plus scale_rounding
    if restrict == "power_of_two":
        if not sf.is_power_of_two:
            raise ScaleSetupError(names.format, f"{sf.name} holds float scales: it needs "
                                                f"{names.restrict}=RestrictScaling.FP (amax / max_normal)")
        return rule if rule is not None else sf.default_rule
    if sf.is_power_of_two:
        raise ScaleSetupError(names.format, f"{sf.name} holds powers of two: it needs "
                                            f"{names.restrict}=RestrictScaling.POWER_OF_TWO")
    if rule not in (None, "floor", "float"):  # floor is every quantizer's default: nothing was asked
        raise ScaleSetupError(names.rule, (
            f"{names.rule}={rule!r} chooses a power of two, but {names.restrict}=FP scales are amax / max_normal "
            f"stored as {sf.name}, which no rounding rule changes; set {names.restrict}=RestrictScaling.POWER_OF_TWO "
            f"(with an exponent scale format such as e8m0) or leave {names.rule} at its default"))
    return "float"


def check_scale_setup(scale_format: Optional[ScaleFormat], rule: Optional[str], *, restrict: Optional[str] = None,
                      tensor_scale: object = False, source: str = "stats", statistic: str = "abs_max",
                      granularity: str = "group", names: SettingNames = OPS_SETTINGS) -> Tuple[ScaleFormat, str, bool]:
    """(scale format, rule, tensor scale) of a set-up, checked; :class:`ScaleSetupError` names the setting.

    ``scale_format`` None: the rule's default (float32 for ``float``, else E8M0). ``rule``: a name in
    :data:`SCALE_RULES` or None (the format's default); with ``restrict`` (``fp`` / ``power_of_two``,
    the quantizers' setting) it is the power-of-two rounding, which FP scales refuse unless it is the
    default ``floor``. ``tensor_scale`` (a per-tensor float32 second scale) needs a format that takes
    one, group granularity and abs-max scales from each tensor; so does any format but E8M0 / float32.
    """
    if not isinstance(tensor_scale, bool):
        raise TypeError(f"{names.tensor_scale} must be True or False, got {tensor_scale!r}")
    given = scale_format is not None
    if scale_format is None:
        implied = "float" if restrict == "fp" else ("floor" if restrict == "power_of_two" else rule)
        scale_format = default_scale_format(implied)
    rule = _check_rule(scale_format, rule, restrict, names)
    dynamic = source == "stats" and statistic == "abs_max"
    if given and not scale_format.any_scale_source and not dynamic:
        raise ScaleSetupError(names.format, (
            f"{scale_format.name} scales are computed from each tensor's abs-max: it needs {names.source}=STATS "
            f"and {names.statistic}=ABS_MAX"))
    if tensor_scale:
        if not given or not scale_format.takes_tensor_scale:
            what = "" if not given else f"; {names.format}={scale_format.name!r} needs none"
            raise ScaleSetupError(names.tensor_scale, (
                f"{names.tensor_scale}=True (a per-tensor float32 second scale) extends the range of a minifloat "
                f"scale format: it needs {names.format}='ue4m3' (or another unsigned minifloat){what}"))
        if granularity != "group":
            raise ScaleSetupError(names.tensor_scale, (
                f"a per-tensor second scale sits over group scales: it needs {names.granularity}=GROUP, "
                f"got {granularity}"))
        if not dynamic:
            raise ScaleSetupError(names.tensor_scale, (
                f"the per-tensor scale comes from each tensor's abs-max: it needs {names.source}=STATS and "
                f"{names.statistic}=ABS_MAX"))
    return scale_format, rule, tensor_scale
