"""Printing a :class:`~groupquant.demo.pipeline.DemoReport`: a text table for people, JSON for machines."""
from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any, Dict

from .pipeline import DemoReport

__all__ = ["format_report", "report_to_dict", "report_to_json"]


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def format_report(report: DemoReport) -> str:
    """The human-readable summary: float model, the PTQ table, and the QAT result."""
    ft = report.float_test
    lines = [
        f"digits: {report.train_size} train / {report.test_size} test images (8x8), "
        f"MLP {report.num_parameters} parameters",
        f"float32 model: test accuracy {_pct(ft.accuracy)}, test loss {ft.loss:.4f}, "
        f"{report.float_bytes} bytes",
        "",
        "post-training quantization (weights and activations, blocks of 32, E8M0 scales):",
        f"{'format':<10} {'bits/elem':>9} {'weight SQNR':>11} {'test acc':>8} {'test loss':>9} {'packed bytes':>12}",
    ]
    for r in report.ptq:
        sqnr = "inf" if math.isinf(r.weight_sqnr_db) else f"{r.weight_sqnr_db:.1f} dB"
        lines.append(f"{r.fmt:<10} {r.bits_per_element:>9.2f} {sqnr:>11} {_pct(r.test.accuracy):>8} "
                     f"{r.test.loss:>9.4f} {r.packed_bytes:>12}")
    if report.qat_format is not None and report.qat_before is not None and report.qat_after is not None:
        b, a = report.qat_before, report.qat_after
        lines += [
            "",
            f"QAT of {report.qat_format} ({report.options.qat_epochs} epochs): test accuracy "
            f"{_pct(b.accuracy)} -> {_pct(a.accuracy)}, test loss {b.loss:.4f} -> {a.loss:.4f} "
            f"(float: {_pct(ft.accuracy)}, {ft.loss:.4f})",
        ]
    lines.append(f"done in {report.seconds:.1f} s")
    return "\n".join(lines)


def report_to_dict(report: DemoReport) -> Dict[str, Any]:
    """The report as plain JSON-able data (infinite SQNR becomes null)."""
    data = asdict(report)
    data["options"]["formats"] = list(report.options.formats)
    data["options"]["hidden"] = list(report.options.hidden)
    for row in data["ptq"]:
        if math.isinf(row["weight_sqnr_db"]):
            row["weight_sqnr_db"] = None
    return data


def report_to_json(report: DemoReport) -> str:
    """:func:`report_to_dict` as indented JSON."""
    return json.dumps(report_to_dict(report), indent=2)
