"""Calibration: post-training methods that win back accuracy without training (GPTQ, scale
search, mixed precision; rotations and smoothing), and :func:`ptq`, which runs them block by block.
See docs/calibration.md."""
from .auto_precision import auto_precision
from .gptq import gptq_quantize
from .methods import DEFAULT_METHODS, ORDER
from .ptq import calibrate, ptq
from .report import LayerReport, format_reports
from .upstream_correction import correct_upstream  # noqa: F401  (experimental: docs/calibration-upstream.md)
from .scale_search import search_grid
from .weight_grid import WeightGrid, rule_grid

__all__ = ["ptq", "auto_precision", "calibrate", "gptq_quantize", "search_grid", "WeightGrid", "rule_grid", "LayerReport",
           "format_reports", "DEFAULT_METHODS", "ORDER"]
