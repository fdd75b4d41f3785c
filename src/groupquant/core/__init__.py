"""nn.Modules and helpers that compute quantization: granularity, statistics, scale restriction,
scale sources (statistics, running statistics, learned) and the quantize-dequantize modules.

Everything here takes explicit arguments (formats, strings, ints); the declarative settings of
:mod:`groupquant.quantizers` are translated into these by its solvers.
"""
from .dynamic_quant import DynamicQuant, DynamicQuantSettings, dynamic_fake_quant
from .granularity import GRANULARITIES, ScaleGranularity
from .learned_scale import LearnedScale
from .mse_scale import MSE_ROUNDING_MODES, MSEScale, mse_scale
from .quant_output import QuantOutput
from .restrict import RESTRICTIONS, scale_from_stat
from .running_scale import RunningStatsScale
from .scaled_quant import ScaledQuant
from .scaled_round import scaled_round
from .stats import STATS_OPS, ScalingStats
from .stats_scale import StatsScale
from .ste import STE_MODES, round_ste, round_to_format_ste

__all__ = [
    "DynamicQuant", "DynamicQuantSettings", "dynamic_fake_quant", "GRANULARITIES", "ScaleGranularity", "LearnedScale", "QuantOutput",
    "RESTRICTIONS", "scale_from_stat", "RunningStatsScale", "ScaledQuant", "scaled_round", "STATS_OPS",
    "ScalingStats", "StatsScale", "STE_MODES", "round_ste", "round_to_format_ste",
]
__all__ += ["MSE_ROUNDING_MODES", "MSEScale", "mse_scale"]
