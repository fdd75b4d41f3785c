"""LayerReport for the rotation and smoothing methods until the calibration package's shared
:mod:`groupquant.calib.report` is merged (same fields; the lead unifies the two)."""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LayerReport"]


@dataclass(frozen=True)
class LayerReport:
    """What one calibration method did to one layer: ``error_before`` / ``error_after`` in the
    units ``detail`` names (mean squared error of the layer's output or the method's objective)."""

    layer: str
    method: str
    error_before: float
    error_after: float
    detail: str = ""
