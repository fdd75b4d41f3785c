"""The enumerated settings of a quantizer, and how a user's value is checked against them.

Every enum is a ``str`` enum whose values are the lower-level names the core and ops use, so a
setting may be given as the member (``ScaleRounding.CEIL``), its value (``"ceil"``) or its name
(``"CEIL"``); anything else is a :class:`groupquant.inject.ConfigError` naming the setting.
"""
from __future__ import annotations

import enum
from typing import Type, TypeVar

from ..formats import SpecialValues
from ..inject import ConfigError

__all__ = [
    "ScalingPerOutput", "RestrictScaling", "ScaleRounding", "FloatToIntRounding", "NanInfRule",
    "ScalingSource", "ScalingStatsOp", "SteMode", "coerce",
]


class ScalingPerOutput(str, enum.Enum):
    """Which elements share a scale: the whole tensor, one output channel, or a group of
    ``group_size`` elements along ``group_dim``."""

    TENSOR = "tensor"
    CHANNEL = "channel"
    GROUP = "group"


class RestrictScaling(str, enum.Enum):
    """Scale values: any float (``amax / max_normal``) or a power of two (E8M0-representable)."""

    FP = "fp"
    POWER_OF_TWO = "power_of_two"


class ScaleRounding(str, enum.Enum):
    """How a power-of-two scale's exponent is chosen from the abs-max (see
    :mod:`groupquant.ops.shared_scale`): FLOOR is OCP MX v1.0's ``floor(log2 amax) - emax``;
    FLOAT_LOG2 is microxcaling's, from a float log2 (PyTorch reference only)."""

    FLOOR = "floor"
    CEIL = "ceil"
    EVEN = "even"
    RCEIL = "rceil"
    FLOAT_LOG2 = "float_log2"


class FloatToIntRounding(str, enum.Enum):
    """How a scaled element rounds onto the format's grid: EVEN (nearest, ties to even; OCP),
    NEAREST (ties away from zero), FLOOR (toward zero), STOCHASTIC."""

    EVEN = "even"
    NEAREST = "nearest"
    FLOOR = "floor"
    STOCHASTIC = "stochastic"


#: The NaN/Inf rule of a minifloat: OCP (derived from the widths), FNUZ, IEEE, NAN_ONLY, NONE.
#: It is the format core's :class:`groupquant.formats.SpecialValues`, under the setting's name.
NanInfRule = SpecialValues


class ScalingSource(str, enum.Enum):
    """Where a scale comes from.

    STATS          the statistic of the tensor being quantized, on every call (weights; dynamic
                   per-group MX activations).
    RUNNING_STATS  running statistics collected in training, frozen in eval (per-tensor activations).
    LEARNED        an ``nn.Parameter`` initialised from the statistic on the first call and
                   trained through a straight-through estimator.
    """

    STATS = "stats"
    RUNNING_STATS = "running_stats"
    LEARNED = "learned"


class ScalingStatsOp(str, enum.Enum):
    """What a scale is computed from: the abs-max of ``|x|``, a percentile of it (per tensor or
    channel), or MSE: the power-of-two scale with the least squared error (a search)."""

    ABS_MAX = "abs_max"
    PERCENTILE = "percentile"
    MSE = "mse"


class SteMode(str, enum.Enum):
    """Gradient of rounding: IDENTITY (straight through) or CLIPPED (zero where saturated)."""

    IDENTITY = "identity"
    CLIPPED = "clipped"


E = TypeVar("E", bound=enum.Enum)


def coerce(setting: str, given: object, enum_type: Type[E]) -> E:
    """``given`` as a member of ``enum_type``; ConfigError naming ``setting`` otherwise."""
    if isinstance(given, enum_type):
        return given
    if isinstance(given, str):
        for member in enum_type:
            if given.lower() in (member.value.lower(), member.name.lower()):
                return member
    choices = ", ".join(f"{enum_type.__name__}.{m.name}" for m in enum_type)
    raise ConfigError(setting, f"must be one of {choices} (or their names as strings), got {given!r}")
