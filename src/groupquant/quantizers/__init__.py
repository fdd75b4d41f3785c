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
from .minifloat import (Fp8e4m3Mixin, Fp8e5m2Mixin, Fp6e3m2Mixin, Fp6e2m3Mixin, Fp4e2m1Mixin, Fp8e4m3FNUZMixin,
                        Fp8e5m2FNUZMixin, FpOCPMixin, FpFNUZMixin, FpOCPWeightPerTensorFloat,
                        FpOCPWeightPerChannelFloat, FpOCPActPerTensorFloat, FpOCPActPerChannelFloat2d,
                        FpFNUZWeightPerTensorFloat, FpFNUZWeightPerChannelFloat, FpFNUZActPerTensorFloat,
                        Fp8e4m3OCPWeightPerTensorFloat, Fp8e4m3OCPWeightPerChannelFloat,
                        Fp8e4m3OCPActPerTensorFloat, Fp8e5m2OCPWeightPerTensorFloat,
                        Fp8e5m2OCPWeightPerChannelFloat, Fp8e5m2OCPActPerTensorFloat,
                        Fp8e4m3FNUZWeightPerTensorFloat, Fp8e4m3FNUZWeightPerChannelFloat,
                        Fp8e4m3FNUZActPerTensorFloat, Fp8e5m2FNUZWeightPerTensorFloat,
                        Fp8e5m2FNUZWeightPerChannelFloat, Fp8e5m2FNUZActPerTensorFloat)
from .mx import (MSEScaling, MXFloat4e2m1WeightMSE, MXFloat6e2m3WeightMSE, MXFloat6e3m2WeightMSE,
                 MXFloat8e4m3WeightMSE, MXFloat8e5m2WeightMSE, MXInt8WeightMSE)
from .mx import (MXFloat4e2m1Act, MXFloat4e2m1Weight, MXFloat6e2m3Act, MXFloat6e2m3Weight, MXFloat6e3m2Act,
                 MXFloat6e3m2Weight, MXFloat8e4m3Act, MXFloat8e4m3Weight, MXFloat8e5m2Act, MXFloat8e5m2Weight,
                 MXInt8Act, MXInt8Weight, MX_QUANTIZERS, MXQuantizerPair, mx_quantizers)
from .nvfp4 import NVFP4Act, NVFP4Scaling, NVFP4Weight
from .pairs import BLOCK_FORMATS, canonical_block_format, quantizer_pair
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
    "NVFP4Act", "NVFP4Scaling", "NVFP4Weight", "BLOCK_FORMATS", "canonical_block_format", "quantizer_pair",
    "FloatToIntRounding", "NanInfRule", "RestrictScaling", "ScaleRounding", "ScalingPerOutput",
    "ScalingSource", "ScalingStatsOp", "SteMode", "MSEScaling", "MXFloat4e2m1WeightMSE", "MXFloat6e2m3WeightMSE",
    "MXFloat6e3m2WeightMSE", "MXFloat8e4m3WeightMSE", "MXFloat8e5m2WeightMSE", "MXInt8WeightMSE",
    "Fp8e4m3Mixin", "Fp8e5m2Mixin", "Fp6e3m2Mixin", "Fp6e2m3Mixin", "Fp4e2m1Mixin", "Fp8e4m3FNUZMixin",
    "Fp8e5m2FNUZMixin", "FpOCPMixin", "FpFNUZMixin", "FpOCPWeightPerTensorFloat", "FpOCPWeightPerChannelFloat",
    "FpOCPActPerTensorFloat", "FpOCPActPerChannelFloat2d", "FpFNUZWeightPerTensorFloat",
    "FpFNUZWeightPerChannelFloat", "FpFNUZActPerTensorFloat", "Fp8e4m3OCPWeightPerTensorFloat",
    "Fp8e4m3OCPWeightPerChannelFloat", "Fp8e4m3OCPActPerTensorFloat", "Fp8e5m2OCPWeightPerTensorFloat",
    "Fp8e5m2OCPWeightPerChannelFloat", "Fp8e5m2OCPActPerTensorFloat", "Fp8e4m3FNUZWeightPerTensorFloat",
    "Fp8e4m3FNUZWeightPerChannelFloat", "Fp8e4m3FNUZActPerTensorFloat", "Fp8e5m2FNUZWeightPerTensorFloat",
    "Fp8e5m2FNUZWeightPerChannelFloat", "Fp8e5m2FNUZActPerTensorFloat",
]
