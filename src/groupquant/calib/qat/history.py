"""What a training run records, and the early-stopping rule on held-out perplexity.

Each optimiser step leaves a :class:`StepRecord` (its mean loss over the micro-batches of every
rank, its learning rate, and the held-out perplexity when it was measured); the run's list is
``model.qat_history``. Step 0's record holds the perplexity before training (the starting
model's: round to nearest or ptq), with no loss.

:class:`EarlyStopping`: the best perplexity so far and the trainable parameters at it; after
``patience`` evaluations in a row without a lower perplexity the run stops, and at the end the
model gets the parameters of its best evaluation back (so it is never worse on the held-out text
than where it started).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence

import torch
from torch import nn

__all__ = ["StepRecord", "EarlyStopping", "format_history"]


@dataclass(frozen=True)
class StepRecord:
    """One optimiser step (``step`` counts from 1; 0 is the model before training).

    ``loss``: mean distillation loss over the step's micro-batches on every rank (None at step 0);
    ``lr``: the learning rate used (None at step 0); ``perplexity``: held-out perplexity after the
    step, when measured, else None; ``kl`` / ``lm`` / ``hidden``: the loss's terms (None when off)."""

    step: int
    loss: Optional[float]
    lr: Optional[float]
    perplexity: Optional[float] = None
    kl: Optional[float] = None
    lm: Optional[float] = None
    hidden: Optional[float] = None


class EarlyStopping:
    """The best held-out perplexity so far, its step and a copy of the trainable parameters then."""

    def __init__(self, params: Sequence[nn.Parameter], patience: Optional[int]) -> None:
        self.params = list(params)
        self.patience = patience
        self.best = math.inf
        self.best_step: Optional[int] = None
        self.saved: Optional[List[torch.Tensor]] = None
        self.misses = 0

    def update(self, step: int, perplexity: float) -> bool:
        """Record an evaluation; True when the run should stop (``patience`` misses in a row)."""
        if perplexity < self.best:
            self.best, self.best_step, self.misses = perplexity, step, 0
            self.saved = [p.detach().clone() for p in self.params]
            return False
        self.misses += 1
        return self.patience is not None and self.misses >= self.patience

    @torch.no_grad()
    def restore(self) -> Optional[int]:
        """Put the best evaluation's parameters back (in place); its step, or None without evaluations."""
        if self.saved is None:
            return None
        for p, saved in zip(self.params, self.saved):
            p.copy_(saved)
        return self.best_step


def format_history(history: Sequence[StepRecord]) -> str:
    """The records that hold a perplexity, as an aligned text table."""
    rows = ["  step      loss        lr  perplexity"]
    for r in history:
        if r.perplexity is None:
            continue
        loss = "-" if r.loss is None else f"{r.loss:.4f}"
        lr = "-" if r.lr is None else f"{r.lr:.2e}"
        rows.append(f"{r.step:>6} {loss:>9} {lr:>9} {r.perplexity:>11.4f}")
    return "\n".join(rows)
