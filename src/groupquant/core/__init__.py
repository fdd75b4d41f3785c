"""nn.Modules and helpers that compute quantization: the resolved spec, granularity, statistics,
scale restriction, scale sources (statistics, running statistics, learned, MSE search) and the
quantize-dequantize modules.

Every module here is built from one :class:`QuantSpec` by :func:`build_tensor_quant`; the
declarative settings of :mod:`groupquant.quantizers` resolve into that spec.
"""
from .build import build_tensor_quant, learned_scale_shape
from .dist_reduce import StatSync, reduce_stat, stat_sync
from .dynamic_quant import DynamicQuant, dynamic_fake_quant
from .granularity import GRANULARITIES, ScaleGranularity
from .learned_scale import LearnedScale
from .mse_scale import MSE_ROUNDING_MODES, MSEScale, mse_scale
from .quant_spec import QuantSpec
from .restrict import RESTRICTIONS, scale_from_stat
from .running_scale import RunningStatsScale
from .scaled_quant import ScaledQuant
from .scaled_round import scaled_round
from .stats import STATS_OPS, ScalingStats
from .stats_scale import StatsScale
from .ste import STE_MODES, round_ste

__all__ = [
    "build_tensor_quant", "learned_scale_shape", "DynamicQuant", "dynamic_fake_quant", "GRANULARITIES",
    "ScaleGranularity", "LearnedScale", "QuantSpec", "RESTRICTIONS", "scale_from_stat", "RunningStatsScale",
    "ScaledQuant", "scaled_round", "STATS_OPS", "ScalingStats", "StatsScale", "STE_MODES", "round_ste",
]
__all__ += ["StatSync", "reduce_stat", "stat_sync"]
__all__ += ["MSE_ROUNDING_MODES", "MSEScale", "mse_scale"]
