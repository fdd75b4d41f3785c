"""Declarative quantizers: settings enums, bases, solvers, and the default quantizers.

Subclass a default to change a setting::

    class MyFP6(MXFloat8e4m3Weight):
        bit_width = 6
        exponent_bit_width = 2
        mantissa_bit_width = 3      # OCP FP6 E2M3: max normal 7.5, no NaN/Inf, all derived

or ``MXFloat4e2m1Weight.let(group_size=16)``; ``groupquant.describe(Q)`` shows the result.
"""
from .base import (ActQuantizer, BiasQuantizer, FloatQuantizer, IntQuantizer, LearnedScaling, MXScaling,
                   QuantizerBase, QuantizerMixin, WeightQuantizer, quantizer_spec)
from .defaults import (Fp8e4m3ActPerTensor, Fp8e4m3WeightPerTensor, Int4WeightPerGroupFloat, Int8ActPerTensor,
                       Int8WeightPerChannel, Int8WeightPerTensor, Int16BiasPerTensor, Uint8ActPerTensor)
from .describe import describe
from .mx import (MXFloat4e2m1Act, MXFloat4e2m1Weight, MXFloat6e2m3Act, MXFloat6e2m3Weight, MXFloat6e3m2Act,
                 MXFloat6e3m2Weight, MXFloat8e4m3Act, MXFloat8e4m3Weight, MXFloat8e5m2Act, MXFloat8e5m2Weight,
                 MXInt8Act, MXInt8Weight, MX_QUANTIZERS, MXQuantizerPair, mx_quantizers)
from .settings import (FloatToIntRounding, NanInfRule, RestrictScaling, ScaleRounding, ScalingPerOutput,
                       ScalingSource, ScalingStatsOp, SteMode)

# Q.describe() and groupquant.describe(Q) are one function.
type.__setattr__(QuantizerMixin, "__describer__", describe)

__all__ = [
    "ActQuantizer", "BiasQuantizer", "FloatQuantizer", "IntQuantizer", "LearnedScaling", "MXScaling",
    "QuantizerBase", "QuantizerMixin", "WeightQuantizer", "quantizer_spec",
    "Fp8e4m3ActPerTensor", "Fp8e4m3WeightPerTensor", "Int4WeightPerGroupFloat", "Int8ActPerTensor",
    "Int8WeightPerChannel", "Int8WeightPerTensor", "Int16BiasPerTensor", "Uint8ActPerTensor",
    "describe",
    "MXFloat4e2m1Act", "MXFloat4e2m1Weight", "MXFloat6e2m3Act", "MXFloat6e2m3Weight", "MXFloat6e3m2Act",
    "MXFloat6e3m2Weight", "MXFloat8e4m3Act", "MXFloat8e4m3Weight", "MXFloat8e5m2Act", "MXFloat8e5m2Weight",
    "MXInt8Act", "MXInt8Weight", "MX_QUANTIZERS", "MXQuantizerPair", "mx_quantizers",
    "FloatToIntRounding", "NanInfRule", "RestrictScaling", "ScaleRounding", "ScalingPerOutput",
    "ScalingSource", "ScalingStatsOp", "SteMode",
]
