"""The settings a quantizer class body, ``let()`` or a layer keyword may set: one documented table.

Every plain name in a quantizer class body must be one of :data:`SETTINGS` (a misspelling fails
when the class is defined, with a did-you-mean); the values :data:`DERIVED` follow from the
widths and cannot be set; names other libraries use (:data:`FOREIGN_NAMES`: Brevitas,
microxcaling, torchao) get a message naming groupquant's setting. A class may declare
``__extra_settings__ = ("name", ...)`` for plain names a solver of its own reads; ``value(...)``
solvers may add names freely (they are code, not a typo).
"""
from __future__ import annotations

from typing import Dict

__all__ = ["SETTINGS", "DERIVED", "FOREIGN_NAMES"]

#: Setting name -> what it means. The order is the order ``describe`` shows.
SETTINGS: Dict[str, str] = {
    # element format
    "bit_width": "element bits in all (sign, exponent and mantissa bits; or the integer width)",
    "exponent_bit_width": "minifloat exponent bits",
    "mantissa_bit_width": "minifloat mantissa bits",
    "signed": "whether elements carry a sign",
    "narrow_range": "integers: symmetric range without the most negative code (MXINT8: [-127, 127])",
    "nan_inf_rule": "minifloats: NaN/Inf codes (NanInfRule.OCP derives them from the widths)",
    "exponent_bias": "minifloats: exponent bias (None: the standard 2**(E-1) - 1, +1 for FNUZ)",
    "saturating": "values past max normal clamp to it (False: become Inf/NaN by the format's rule)",
    "element_precision": "None, or a precision (\"bfloat16\", \"fp16\", \"e5m7\", ...) the tensor is rounded to, "
                         "unscaled, before it is quantized",
    # scale sharing
    "scaling_per_output": "ScalingPerOutput.TENSOR, CHANNEL or GROUP",
    "scaling_per_output_channel": "deprecated boolean: True is CHANNEL, False is TENSOR",
    "group_size": "elements sharing one scale (GROUP)",
    "group_dim": "dim groups run along (None: the dim the layer reduces over for this operand)",
    "channel_dim": "dim of per-channel scales (None: the layer's output / feature channel dim)",
    # scale value
    "restrict_scaling_type": "RestrictScaling.FP (any float) or POWER_OF_TWO (E8M0)",
    "scale_format": "the scale's number format: None (E8M0 for POWER_OF_TWO, float32 for FP), 'e{k}m0', "
                    "'ue4m3' (NVFP4), 'ue{e}m{m}', 'bfloat16', 'float32'",
    "tensor_scale": "a per-tensor float32 second scale over minifloat block scales (NVFP4: True)",
    "block_scheme": "None, or a scheme name ('nvfp4') whose element format, scale format and block size the "
                    "quantizer must keep",
    "scale_rounding": "power-of-two rule: ScaleRounding.FLOOR (OCP), CEIL, EVEN, RCEIL, FLOAT_LOG2",
    "scaling_source": "ScalingSource.STATS (each tensor), RUNNING_STATS or LEARNED",
    "scaling_stats_op": "ScalingStatsOp.ABS_MAX, PERCENTILE or MSE (search of power-of-two scales)",
    "percentile": "PERCENTILE statistic, in (0, 100]",
    "mse_window": "MSE: binades below the floor rule's exponent that the search also tries",
    "running_momentum": "RUNNING_STATS: weight of each new batch statistic, in (0, 1]",
    "scaling_min_val": "LEARNED fp scales: smallest scale",
    # elements
    "float_to_int_rounding": "FloatToIntRounding.EVEN (OCP), NEAREST, FLOOR or STOCHASTIC",
    "ste": "gradient of rounding: SteMode.IDENTITY or CLIPPED",
}

#: Values derived from the widths: reading them is fine, setting them is refused.
DERIVED: Dict[str, str] = {
    "element_format": "the format object built from the widths",
    "format_name": "the format's name",
    "bias": "the exponent bias in use (set exponent_bias to change it)",
    "special_values": "the resolved NaN/Inf rule (set nan_inf_rule)",
    "emax": "exponent of the largest binade",
    "max_normal": "largest finite element value",
    "min_normal": "smallest positive normal value",
    "min_subnormal": "smallest positive value",
    "qmin": "smallest integer code",
    "qmax": "largest integer code",
}

#: Names other libraries use, and what groupquant calls them.
FOREIGN_NAMES: Dict[str, str] = {
    "scaling_per_output_type": "Brevitas's scaling_per_output_type is groupquant's scaling_per_output "
                               "(ScalingPerOutput.TENSOR, CHANNEL, GROUP)",
    "scaling_impl_type": "Brevitas's scaling_impl_type is groupquant's scaling_source "
                         "(ScalingSource.STATS, RUNNING_STATS, LEARNED)",
    "restrict_value_float_to_int_impl": "Brevitas's restrict_value_float_to_int_impl (FloorSte, CeilSte, ...) is "
                                        "groupquant's scale_rounding (ScaleRounding.FLOOR, CEIL, EVEN, RCEIL)",
    "float_to_int_impl_type": "Brevitas's float_to_int_impl_type is groupquant's float_to_int_rounding "
                              "(FloatToIntRounding.EVEN, NEAREST, FLOOR, STOCHASTIC)",
    "float_to_int_impl": "Brevitas's float_to_int_impl is groupquant's float_to_int_rounding",
    "nan_values": "Brevitas's nan_values / inf_values are groupquant's nan_inf_rule "
                  "(NanInfRule.OCP, IEEE, NAN_ONLY, FNUZ, NONE)",
    "inf_values": "Brevitas's nan_values / inf_values are groupquant's nan_inf_rule "
                  "(NanInfRule.OCP, IEEE, NAN_ONLY, FNUZ, NONE)",
    "high_percentile_q": "Brevitas's high_percentile_q is groupquant's percentile",
    "stats_reduce_dim": "groupquant takes group_dim / channel_dim instead of Brevitas's stats_reduce_dim",
    "scaling_stats_permute_dims": "groupquant takes channel_dim instead of Brevitas's scaling_stats_permute_dims",
    "zero_point_impl": "groupquant's quantizers are symmetric (zero point 0)",
    "bit_width_impl_type": "bit widths are fixed settings in groupquant (bit_width)",
    "block_size": "block_size (microxcaling, torchao) is groupquant's group_size",
    "elem_format": "microxcaling's elem_format is given by the widths in groupquant (bit_width, "
                   "exponent_bit_width, mantissa_bit_width) or a default quantizer (MXFloat4e2m1Weight, ...)",
    "round": "microxcaling's round is groupquant's float_to_int_rounding",
    "scale_bits": "microxcaling's scale_bits is groupquant's scale_format ('e{k}m0' for k-bit shared exponents)",
    "per_tensor_scale": "torchao's NVFP4 per_tensor_scale is groupquant's tensor_scale (True: computed per tensor)",
    "scale_calculation_mode": "torchao's scale_calculation_mode is groupquant's scale_rounding",
}
