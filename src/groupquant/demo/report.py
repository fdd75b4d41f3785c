"""Printing a :class:`~groupquant.demo.pipeline.DemoReport`: a text table for people, JSON for machines."""
from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any, Dict, List, Optional

from .pipeline import DemoReport, RecipeResult

__all__ = ["format_report", "report_to_dict", "report_to_json"]


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _operand(quantizer: Optional[str]) -> str:
    return "float" if quantizer is None else quantizer


def _recipe_lines(report: DemoReport, r: RecipeResult) -> List[str]:
    """The recipe section: which quantizer takes each GEMM operand, then float vs recipe."""
    o = {k: _operand(v) for k, v in r.operands.items()}
    width = max(len(v) for v in o.values()) + 1
    ft, rt = report.float_test, r.test
    sqnr = "inf" if math.isinf(r.initial_grad_sqnr_db) else f"{r.initial_grad_sqnr_db:.1f} dB"
    lines = [
        f"training recipe {r.name!r}: the float model's initial weights trained again with the same epochs, "
        "learning rate and batch order;",
        f"each of its {r.layers} layers quantizes (blocks along each GEMM's reduction dim):",
        f"  forward   y  = x W^T   x:  {o['input_quant']:<{width}} W: {o['weight_quant']:<{width}} (along inputs)",
        f"  backward  dX = dY W    dY: {o['grad_output_quant']:<{width}} W: "
        f"{o['weight_quant_for_grad_input']:<{width}} (along outputs)",
        f"  backward  dW = dY^T x  dY: {o['grad_output_quant_for_grad_weight']:<{width}} x: "
        f"{o['input_quant_for_grad_weight']:<{width}} (along tokens)",
    ]
    if not r.backward_quantized:
        lines.append("  (backward GEMMs in float: the straight-through gradient of the quantized forward)")
    return lines + [
        "",
        f"{'model':<22} {'test acc':>8} {'test loss':>9} {'final train loss':>16} {'grad SQNR at init':>17}",
        f"{'float32':<22} {_pct(ft.accuracy):>8} {ft.loss:>9.4f} {_last(report.float_loss_curve):>16} {'-':>17}",
        f"{r.name:<22} {_pct(rt.accuracy):>8} {rt.loss:>9.4f} {_last(r.loss_curve):>16} {sqnr:>17}",
        "grad SQNR at init: weight gradients of the recipe model vs float's, same weights, whole training set.",
    ]


def _last(curve: List[float]) -> str:
    return f"{curve[-1]:.4f}" if curve else "-"


def format_report(report: DemoReport) -> str:
    """The human-readable summary: float model, the PTQ table, the QAT result, the recipe's run."""
    ft = report.float_test
    lines = [
        f"digits: {report.train_size} train / {report.test_size} test images (8x8), "
        f"MLP {report.num_parameters} parameters",
        f"float32 model: test accuracy {_pct(ft.accuracy)}, test loss {ft.loss:.4f}, "
        f"{report.float_bytes} bytes",
    ]
    if report.ptq:
        lines += [
            "",
            "post-training quantization (weights and activations; MX: blocks of 32, E8M0 scales; "
            "NVFP4: blocks of 16, E4M3 scales, FP32 tensor scale):",
            f"{'format':<10} {'bits/elem':>9} {'weight SQNR':>11} {'test acc':>8} {'test loss':>9} {'packed bytes':>12}",
        ]
    for r in report.ptq:
        sqnr = "inf" if math.isinf(r.weight_sqnr_db) else f"{r.weight_sqnr_db:.1f} dB"
        lines.append(f"{r.fmt:<10} {r.bits_per_element:>9.2f} {sqnr:>11} {_pct(r.test.accuracy):>8} "
                     f"{r.test.loss:>9.4f} {r.packed_bytes:>12}")
    if report.packed:
        lines += [
            "",
            "packed inference (groupquant.pack_model: element codes and scale bytes only, decoded inside the GEMM;",
            "latency: one forward over the whole test set, best of 20):",
            f"{'format':<10} {'state bytes':>11} {'test acc':>8} {'packed ms':>9} {'fake-quant ms':>13} {'float ms':>8}",
        ]
    for p in report.packed:
        lines.append(f"{p.fmt:<10} {p.state_bytes:>11} {_pct(p.test.accuracy):>8} {p.packed_ms:>9.3f} "
                     f"{p.fake_quant_ms:>13.3f} {p.float_ms:>8.3f}")
    if report.qat_format is not None and report.qat_before is not None and report.qat_after is not None:
        b, a = report.qat_before, report.qat_after
        lines += [
            "",
            f"QAT of {report.qat_format} ({report.options.qat_epochs} epochs): test accuracy "
            f"{_pct(b.accuracy)} -> {_pct(a.accuracy)}, test loss {b.loss:.4f} -> {a.loss:.4f} "
            f"(float: {_pct(ft.accuracy)}, {ft.loss:.4f})",
        ]
    if report.recipe is not None:
        lines += ["", *_recipe_lines(report, report.recipe)]
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
    if data["recipe"] is not None and math.isinf(data["recipe"]["initial_grad_sqnr_db"]):
        data["recipe"]["initial_grad_sqnr_db"] = None
    return data


def report_to_json(report: DemoReport) -> str:
    """:func:`report_to_dict` as indented JSON."""
    return json.dumps(report_to_dict(report), indent=2)
