"""The final table of ``python -m groupquant llm``: one row per model measured (float, then the
quantized and packed model), with format, bits per weight, perplexity, bytes in memory and on
disk, and greedy-decoding speed."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["ReportRow", "format_report"]

_MIB = 1024 * 1024


@dataclass(frozen=True)
class ReportRow:
    """One model's measurements. ``bits_per_weight``: storage bits per weight of the quantized
    linear layers (their float width for the float model); ``perplexity`` on the evaluation text;
    ``weight_bytes``: the whole model's parameters and buffers in memory; ``file_bytes``: the
    checkpoint files written (weights and config; None when not saved); ``tokens_per_second``:
    greedy decoding at batch 1."""

    label: str
    bits_per_weight: float
    perplexity: float
    weight_bytes: int
    file_bytes: Optional[int]
    tokens_per_second: float


def _num(value: float, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def format_report(rows: Sequence[ReportRow]) -> str:
    """The rows as an aligned text table, with a line saying what each column counts."""
    head = ("format", "bits/weight", "perplexity", "weights MiB", "file MiB", "tokens/s")
    cells = [head] + [(r.label, _num(r.bits_per_weight, ".2f"), _num(r.perplexity, ".3f"),
                       _num(r.weight_bytes / _MIB, ".1f"),
                       "-" if r.file_bytes is None else _num(r.file_bytes / _MIB, ".1f"),
                       _num(r.tokens_per_second, ".1f")) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    lines = ["  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row))
             for row in cells]
    lines.append("bits/weight: storage of the quantized linear weights (codes + block scales + tensor scales);\n"
                 "weights MiB: the whole model in memory (float embeddings and head included);\n"
                 "file MiB: the checkpoint written with --save (weights and config; not the tokenizer files);\n"
                 "tokens/s: greedy model.generate at batch 1, prompt included.")
    return "\n".join(lines)
