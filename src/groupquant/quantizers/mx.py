"""OCP Microscaling (MX v1.0) quantizers: groups of 32 along the input features, E8M0 scales
(floor rule), elements rounded to nearest even and saturated.

Each gives exactly ``groupquant.fake_quant(x, fmt, 32, dim)`` on the same data (``fmt`` is the
element format in its name; ``dim`` is 1 for weights, the layer's feature/channel dim for
activations). MXINT8 elements are 1.6 fixed point (max 127/64, emax 0), as the spec defines.
Each is a short stack: element-format mixin (:mod:`.format_mixins`), ``MXScaling``, role, element
kind. Subclass to change a width: every derived value (bias, emax, max normal, NaN/Inf codes) follows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from ..formats import get_format
from .base import ActQuantizer, FloatQuantizer, IntQuantizer, MXScaling, QuantizerMixin, WeightQuantizer
from .format_mixins import Fp4e2m1Mixin, Fp6e2m3Mixin, Fp6e3m2Mixin, Fp8e4m3Mixin, Fp8e5m2Mixin, MXInt8Mixin
from .settings import ScalingStatsOp

__all__ = [
    "MXInt8Weight", "MXInt8Act", "MXFloat8e4m3Weight", "MXFloat8e4m3Act", "MXFloat8e5m2Weight",
    "MXFloat8e5m2Act", "MXFloat6e3m2Weight", "MXFloat6e3m2Act", "MXFloat6e2m3Weight", "MXFloat6e2m3Act",
    "MXFloat4e2m1Weight", "MXFloat4e2m1Act", "MXQuantizerPair", "MX_QUANTIZERS", "mx_quantizers", "MSEScaling",
    "MXInt8WeightMSE", "MXFloat8e4m3WeightMSE", "MXFloat8e5m2WeightMSE", "MXFloat6e3m2WeightMSE",
    "MXFloat6e2m3WeightMSE", "MXFloat4e2m1WeightMSE",
]


class MXInt8Weight(MXInt8Mixin, MXScaling, WeightQuantizer, IntQuantizer):
    """MXINT8 weights (int8 codes in [-127, 127] read as 1.6 fixed point, E8M0 scale per 32)."""


class MXInt8Act(MXInt8Mixin, MXScaling, ActQuantizer, IntQuantizer):
    """MXINT8 activations (dynamic per-group scales)."""


class MXFloat8e4m3Weight(Fp8e4m3Mixin, MXScaling, WeightQuantizer, FloatQuantizer):
    """MXFP8 E4M3 weights (max 448, NaN only)."""


class MXFloat8e4m3Act(Fp8e4m3Mixin, MXScaling, ActQuantizer, FloatQuantizer):
    """MXFP8 E4M3 activations (dynamic per-group scales)."""


class MXFloat8e5m2Weight(Fp8e5m2Mixin, MXScaling, WeightQuantizer, FloatQuantizer):
    """MXFP8 E5M2 weights (max 57344, IEEE Inf/NaN)."""


class MXFloat8e5m2Act(Fp8e5m2Mixin, MXScaling, ActQuantizer, FloatQuantizer):
    """MXFP8 E5M2 activations (dynamic per-group scales)."""


class MXFloat6e3m2Weight(Fp6e3m2Mixin, MXScaling, WeightQuantizer, FloatQuantizer):
    """MXFP6 E3M2 weights (max 28, no special values)."""


class MXFloat6e3m2Act(Fp6e3m2Mixin, MXScaling, ActQuantizer, FloatQuantizer):
    """MXFP6 E3M2 activations (dynamic per-group scales)."""


class MXFloat6e2m3Weight(Fp6e2m3Mixin, MXScaling, WeightQuantizer, FloatQuantizer):
    """MXFP6 E2M3 weights (max 7.5, no special values)."""


class MXFloat6e2m3Act(Fp6e2m3Mixin, MXScaling, ActQuantizer, FloatQuantizer):
    """MXFP6 E2M3 activations (dynamic per-group scales)."""


class MXFloat4e2m1Weight(Fp4e2m1Mixin, MXScaling, WeightQuantizer, FloatQuantizer):
    """MXFP4 E2M1 weights (max 6, no special values)."""


class MXFloat4e2m1Act(Fp4e2m1Mixin, MXScaling, ActQuantizer, FloatQuantizer):
    """MXFP4 E2M1 activations (dynamic per-group scales)."""


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
