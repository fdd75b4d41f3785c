"""Error correction from the already quantized upstream layers, for one linear layer: the weight is
fitted to the float model's output on the float model's inputs while it multiplies the quantized
model's inputs, then rounded by GPTQ (the target of GPTAQ, Li et al. 2025, and of Qronos, Zhang et
al. 2025: "correct the error of the layers before").

With ``x`` the float model's input to the layer, ``x~`` the quantized model's (after the layer's
online rotation and input quantizer: what its GEMM multiplies), ``W`` the float weight and ``Q`` the
quantized one, the mean squared output error per output is

    J(Q) = [tr(W H_ff W^T) - 2 tr(Q H_qf W^T) + tr(Q H_qq Q^T)] / out_features

with ``H_qq = E[x~ x~^T]``, ``H_qf = E[x~ x^T]``, ``H_ff = E[x x^T]`` (:class:`PairedMoments`). Its
unconstrained minimum is ``W* = W H_qf^T H_qq^-1`` (least squares of ``x W^T`` on ``x~``; damped
toward ``W`` by a ridge, :func:`float_target_weight`), and
``J(Q) = J(W*) + tr((Q - W*) H_qq (Q - W*)^T) / out_features``: GPTQ on ``W*`` with ``H_qq``
minimises ``J`` over the grid. :func:`correct_layer` keeps, of round to nearest of ``W``, the
layer's current weight and GPTQ of ``W*``, the one with the least ``J`` (so it is never worse than
round to nearest or than what the layer had, on this objective).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

import torch
from torch import nn

from .gptq import gptq_quantize
from .report import LayerReport
from .weight_grid import grid_unsupported, layer_fake_quant, rule_grid, settle

__all__ = ["PairedMoments", "target_error", "float_target_weight", "correct_layer"]


@dataclass(frozen=True)
class PairedMoments:
    """Means over tokens (float64 ``[I, I]``): ``qq = E[x~ x~^T]``, ``qf = E[x~ x^T]``, ``ff = E[x x^T]``."""

    qq: torch.Tensor
    qf: torch.Tensor
    ff: torch.Tensor
    tokens: int


def target_error(q: torch.Tensor, w: torch.Tensor, m: PairedMoments) -> float:
    """``J(q)`` of the module doc (float64): mean squared error per output of ``x~ q^T`` against ``x w^T``."""
    q, w = q.double(), w.double()
    total = ((w @ m.ff) * w).sum() - 2 * ((q @ m.qf) * w).sum() + ((q @ m.qq) * q).sum()
    return float(total.detach() / w.shape[0])


def float_target_weight(w: torch.Tensor, m: PairedMoments, ridge: float = 1.0) -> torch.Tensor:
    """``W* = (W H_qf^T + d W) (H_qq + d I)^-1`` (float64), ``d = ridge * mean(diag H_qq)``: the
    least-squares fit with a ridge toward the float weight ``W`` (``d = 0``: the plain fit; large
    ``d``: ``W`` itself). Inputs that never fire get ``H_ii = 1``, as in GPTQ."""
    h = m.qq.clone()
    dead = torch.diagonal(h) == 0
    h[dead, dead] = 1.0
    d = float(ridge) * float(torch.diagonal(h).mean())
    h += d * torch.eye(h.shape[0], dtype=h.dtype, device=h.device)
    wt = w.double().T
    return torch.linalg.solve(h, m.qf @ wt + d * wt).T  # (h symmetric)


def correct_layer(name: str, layer: nn.Module, w_float: torch.Tensor, m: PairedMoments, *, ridge: float = 1.0,
                  percdamp: float = 0.01, act_order: bool = True, batch_size: int = 128) -> List[LayerReport]:
    """Store in ``layer`` the best of round to nearest of ``w_float``, its current weight and GPTQ of
    ``W*`` (``ridge``: :func:`float_target_weight`; ``percdamp``, ``act_order``, ``batch_size``: GPTQ's)
    under ``J`` (module doc); one report (``error_before``: round to nearest's ``J``)."""
    reason = grid_unsupported(layer)
    if reason is not None:
        return [LayerReport(name, "float_target", float("nan"), float("nan"), f"skipped: {reason}")]
    unit = "mean squared output error vs the float model's layer on its own inputs"
    w_float = w_float.detach().float()
    rtn = settle(layer, layer_fake_quant(layer, w_float))
    current = layer_fake_quant(layer, layer.weight.detach().float())
    target = float_target_weight(w_float, m, ridge).float()
    grid = rule_grid(layer, target)
    corrected = settle(layer, gptq_quantize(target, m.qq, grid, percdamp=percdamp, act_order=act_order,
                                            batch_size=batch_size))
    candidates = {"round to nearest": rtn, "kept the layer's weight": current, "corrected": corrected}
    errors = {k: target_error(v, w_float, m) for k, v in candidates.items()}
    best = min(errors, key=lambda k: (errors[k], k != "corrected"))
    if best != "kept the layer's weight":
        layer.set_weight(candidates[best])
    detail = unit if best == "corrected" else f"{unit}; {best} (not worse)"
    return [LayerReport(name, "float_target", errors["round to nearest"], errors[best], detail)]
