"""LayerReport: what one calibration method did to one layer, and the table printed from a list of them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List

__all__ = ["LayerReport", "format_reports"]


@dataclass(frozen=True)
class LayerReport:
    """One method's effect on one layer.

    ``error_before`` / ``error_after``: the layer's error before and after the method, in the unit
    ``detail`` names (for ``scale_search`` / ``gptq``: the mean squared output error of the layer's
    quantized weight against its float weight on the calibration inputs,
    ``tr((W - Q) H (W - Q)^T) / out_features`` with ``H = mean(x x^T)`` over calibration tokens;
    ``error_before`` is round to nearest's).
    """

    layer: str
    method: str
    error_before: float
    error_after: float
    detail: str = ""


def format_reports(reports: Iterable[LayerReport]) -> str:
    """The reports as an aligned text table (one line per layer and method, with the error ratio)."""
    rows: List[tuple] = [("layer", "method", "before", "after", "after/before", "detail")]
    for r in reports:
        ratio = r.error_after / r.error_before if r.error_before > 0 else float("nan")
        rows.append((r.layer, r.method, f"{r.error_before:.4g}", f"{r.error_after:.4g}", f"{ratio:.3f}", r.detail))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join("  ".join(cell.ljust(widths[i]) if i < 5 else cell for i, cell in enumerate(row)).rstrip()
                     for row in rows)
