"""OCP Microscaling (MX v1.0) quantizers: groups of 32 along the input features, E8M0 scales
(floor rule), elements rounded to nearest even and saturated.

Each gives exactly ``groupquant.fake_quant(x, fmt, 32, dim)`` on the same data (``fmt`` is the
element format in its name; ``dim`` is 1 for weights, the layer's feature/channel dim for
activations). MXINT8 elements are 1.6 fixed point (max 127/64, emax 0), as the spec defines.
Subclass to change a width: every derived value (bias, emax, max normal, NaN/Inf codes) follows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from ..formats import get_format
from .base import ActQuantizer, FloatQuantizer, IntQuantizer, MXScaling, QuantizerMixin, WeightQuantizer
from .settings import ScalingStatsOp

__all__ = [
    "MXInt8Weight", "MXInt8Act", "MXFloat8e4m3Weight", "MXFloat8e4m3Act", "MXFloat8e5m2Weight",
    "MXFloat8e5m2Act", "MXFloat6e3m2Weight", "MXFloat6e3m2Act", "MXFloat6e2m3Weight", "MXFloat6e2m3Act",
    "MXFloat4e2m1Weight", "MXFloat4e2m1Act", "MXQuantizerPair", "MX_QUANTIZERS", "mx_quantizers", "MSEScaling",
    "MXInt8WeightMSE", "MXFloat8e4m3WeightMSE", "MXFloat8e5m2WeightMSE", "MXFloat6e3m2WeightMSE",
    "MXFloat6e2m3WeightMSE", "MXFloat4e2m1WeightMSE",
]


class MXInt8Weight(MXScaling, WeightQuantizer, IntQuantizer):
    """MXINT8 weights: int8 codes in [-127, 127] read as 1.6 fixed point, E8M0 scale per 32."""

    bit_width = 8
    narrow_range = True


class MXInt8Act(MXScaling, ActQuantizer, IntQuantizer):
    """MXINT8 activations (dynamic per-group scales)."""

    bit_width = 8
    narrow_range = True


class MXFloat8e4m3Weight(MXScaling, WeightQuantizer, FloatQuantizer):
    """MXFP8 E4M3 weights (max 448, NaN only)."""

    bit_width = 8
    exponent_bit_width = 4
    mantissa_bit_width = 3


class MXFloat8e4m3Act(MXScaling, ActQuantizer, FloatQuantizer):
    """MXFP8 E4M3 activations."""

    bit_width = 8
    exponent_bit_width = 4
    mantissa_bit_width = 3


class MXFloat8e5m2Weight(MXScaling, WeightQuantizer, FloatQuantizer):
    """MXFP8 E5M2 weights (max 57344, IEEE Inf/NaN)."""

    bit_width = 8
    exponent_bit_width = 5
    mantissa_bit_width = 2


class MXFloat8e5m2Act(MXScaling, ActQuantizer, FloatQuantizer):
    """MXFP8 E5M2 activations."""

    bit_width = 8
    exponent_bit_width = 5
    mantissa_bit_width = 2


class MXFloat6e3m2Weight(MXScaling, WeightQuantizer, FloatQuantizer):
    """MXFP6 E3M2 weights (max 28, no special values)."""

    bit_width = 6
    exponent_bit_width = 3
    mantissa_bit_width = 2


class MXFloat6e3m2Act(MXScaling, ActQuantizer, FloatQuantizer):
    """MXFP6 E3M2 activations."""

    bit_width = 6
    exponent_bit_width = 3
    mantissa_bit_width = 2


class MXFloat6e2m3Weight(MXScaling, WeightQuantizer, FloatQuantizer):
    """MXFP6 E2M3 weights (max 7.5, no special values)."""

    bit_width = 6
    exponent_bit_width = 2
    mantissa_bit_width = 3


class MXFloat6e2m3Act(MXScaling, ActQuantizer, FloatQuantizer):
    """MXFP6 E2M3 activations."""

    bit_width = 6
    exponent_bit_width = 2
    mantissa_bit_width = 3


class MXFloat4e2m1Weight(MXScaling, WeightQuantizer, FloatQuantizer):
    """MXFP4 E2M1 weights (max 6, no special values)."""

    bit_width = 4
    exponent_bit_width = 2
    mantissa_bit_width = 1


class MXFloat4e2m1Act(MXScaling, ActQuantizer, FloatQuantizer):
    """MXFP4 E2M1 activations."""

    bit_width = 4
    exponent_bit_width = 2
    mantissa_bit_width = 1


@dataclass(frozen=True)
class MXQuantizerPair:
    """The default MX quantizers of one element format: ``weight`` and ``act`` (input) quantizer classes."""

    weight: type
    act: type


#: Canonical MX format name -> its default weight and activation quantizers.
MX_QUANTIZERS: Dict[str, MXQuantizerPair] = {
    "int8": MXQuantizerPair(MXInt8Weight, MXInt8Act),
    "fp8_e4m3": MXQuantizerPair(MXFloat8e4m3Weight, MXFloat8e4m3Act),
    "fp8_e5m2": MXQuantizerPair(MXFloat8e5m2Weight, MXFloat8e5m2Act),
    "fp6_e3m2": MXQuantizerPair(MXFloat6e3m2Weight, MXFloat6e3m2Act),
    "fp6_e2m3": MXQuantizerPair(MXFloat6e2m3Weight, MXFloat6e2m3Act),
    "fp4_e2m1": MXQuantizerPair(MXFloat4e2m1Weight, MXFloat4e2m1Act),
}


def mx_quantizers(fmt: str) -> MXQuantizerPair:
    """The default quantizers of MX format ``fmt`` (any name ``get_format`` knows, e.g. ``'mxfp4'``)."""
    name = get_format(fmt).name
    if name not in MX_QUANTIZERS:
        raise ValueError(f"format {fmt!r} is not an MX element format; MX formats: {', '.join(MX_QUANTIZERS)}")
    return MX_QUANTIZERS[name]


class MSEScaling(QuantizerMixin):
    """Mix in (first) for MSE scales: per group, the power-of-two scale from ``mse_window``
    binades below the OCP floor rule's to one above it with the least squared error."""

    scaling_stats_op = ScalingStatsOp.MSE


class MXInt8WeightMSE(MSEScaling, MXInt8Weight):
    """MXINT8 weights with MSE-searched E8M0 scales."""


class MXFloat8e4m3WeightMSE(MSEScaling, MXFloat8e4m3Weight):
    """MXFP8 E4M3 weights with MSE-searched E8M0 scales."""


class MXFloat8e5m2WeightMSE(MSEScaling, MXFloat8e5m2Weight):
    """MXFP8 E5M2 weights with MSE-searched E8M0 scales."""


class MXFloat6e3m2WeightMSE(MSEScaling, MXFloat6e3m2Weight):
    """MXFP6 E3M2 weights with MSE-searched E8M0 scales."""


class MXFloat6e2m3WeightMSE(MSEScaling, MXFloat6e2m3Weight):
    """MXFP6 E2M3 weights with MSE-searched E8M0 scales."""


class MXFloat4e2m1WeightMSE(MSEScaling, MXFloat4e2m1Weight):
    """MXFP4 E2M1 weights with MSE-searched E8M0 scales."""
