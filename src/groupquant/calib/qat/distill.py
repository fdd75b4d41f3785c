"""The distillation objective of quantization-aware training: the quantized student learns the
float teacher's output distribution, optionally its hidden states and the plain language-model loss.

``loss = kl_weight * T^2 * KL(softmax(t / T) || softmax(s / T)) + lm_weight * CE(s, next token)
+ hidden_weight * hidden``, where ``s`` / ``t`` are the student's and teacher's logits, ``T`` the
temperature (the ``T^2`` keeps the gradient's size independent of ``T``: Hinton, Vinyals, Dean,
*Distilling the Knowledge in a Neural Network*, 2015), the KL and cross-entropy are means over
the positions the attention mask keeps (every position without one), and ``hidden`` is the mean
over layers of the relative squared error ``||h_s - h_t||^2 / ||h_t||^2`` of the hidden states.
Everything is computed in float32 whatever the logits' dtype (bfloat16 under autocast).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
import torch.nn.functional as F

__all__ = ["Distillation", "LossParts", "kl_on_logits", "next_token_loss", "hidden_state_loss", "distillation_loss",
           "logits_of", "hidden_of"]


def _check_weight(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"Distillation: {name} must be a finite number >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Distillation:
    """How the student's loss is made (module doc's formula).

    Fields:
        temperature: ``T`` > 0 of the softened distributions (1: the model's own).
        kl_weight: weight of the KL divergence to the teacher's logits.
        lm_weight: weight of the next-token cross-entropy on the data (needs token ids).
        hidden_weight: weight of the hidden-state term (the models must take ``output_hidden_states=True``).
    """

    temperature: float = 1.0
    kl_weight: float = 1.0
    lm_weight: float = 0.0
    hidden_weight: float = 0.0

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise ValueError(f"Distillation: temperature must be a finite number > 0, got {t!r}")
        for name in ("kl_weight", "lm_weight", "hidden_weight"):
            _check_weight(name, getattr(self, name))
        if self.kl_weight + self.lm_weight + self.hidden_weight == 0:
            raise ValueError("Distillation: kl_weight, lm_weight and hidden_weight are all 0; nothing would be trained")

    @property
    def needs_teacher(self) -> bool:
        """Whether a teacher forward is needed (a KL or hidden-state term)."""
        return self.kl_weight > 0 or self.hidden_weight > 0

    @property
    def needs_hidden(self) -> bool:
        """Whether the hidden states are compared."""
        return self.hidden_weight > 0


@dataclass(frozen=True)
class LossParts:
    """One micro-batch's loss (``total``, differentiable) and its terms (detached; None when off)."""

    total: torch.Tensor
    kl: Optional[torch.Tensor]
    lm: Optional[torch.Tensor]
    hidden: Optional[torch.Tensor]


def _masked_mean(values: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Mean of ``values`` ``[..., positions]`` over the positions where ``mask`` is nonzero (all without a mask)."""
    if mask is None:
        return values.mean()
    keep = mask.to(values.dtype)
    return (values * keep).sum() / keep.sum().clamp_min(1.0)


def kl_on_logits(student: torch.Tensor, teacher: torch.Tensor, temperature: float = 1.0,
                 mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``T^2 * mean KL(softmax(teacher / T) || softmax(student / T))`` over positions (the last
    dim is the vocabulary; ``mask`` ``student.shape[:-1]``, nonzero = kept), in float32."""
    s = F.log_softmax(student.float() / temperature, dim=-1)
    t = F.log_softmax(teacher.float() / temperature, dim=-1)
    per_position = (t.exp() * (t - s)).sum(dim=-1)
    return _masked_mean(per_position, mask) * (temperature * temperature)


def next_token_loss(logits: torch.Tensor, input_ids: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Mean cross-entropy of predicting token ``i + 1`` from position ``i`` (``logits`` ``[B, T, V]``,
    ``input_ids`` ``[B, T]``); a target the mask drops does not count."""
    if logits.dim() != 3 or logits.shape[1] < 2:
        raise ValueError(f"the language-model loss needs logits [batch, seq_len >= 2, vocab], got {tuple(logits.shape)}")
    per_position = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), input_ids[:, 1:], reduction="none")
    return _masked_mean(per_position, None if mask is None else mask[:, 1:])


def hidden_state_loss(student: Sequence[torch.Tensor], teacher: Sequence[torch.Tensor],
                      mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Mean over layers of ``||h_s - h_t||^2 / ||h_t||^2`` (float32) over the positions ``mask``
    (``[batch, seq_len]``, nonzero = kept; padding drops out) keeps, every position without one; the
    two lists must match in length."""
    if len(student) != len(teacher) or not student:
        raise ValueError(f"hidden-state matching: the student gives {len(student)} hidden states and the teacher "
                         f"{len(teacher)}; they must be the same model family with the same number of layers")
    terms = []
    for s, t in zip(student, teacher):
        keep = 1.0 if mask is None else mask.to(device=s.device, dtype=torch.float32).unsqueeze(-1)
        err = ((s.float() - t.float()).square() * keep).sum()
        terms.append(err / (t.float().square() * keep).sum().clamp_min(1e-12))
    return torch.stack(terms).mean()


def logits_of(output: Any) -> torch.Tensor:
    """A model output's logits: its ``.logits``, the first element of a tuple, or the tensor itself."""
    logits = getattr(output, "logits", None)
    if logits is None:
        logits = output[0] if isinstance(output, (tuple, list)) else output
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"the model's output has no logits tensor (got {type(output).__name__})")
    return logits


def hidden_of(output: Any) -> Sequence[torch.Tensor]:
    """A model output's ``hidden_states`` (asked for with ``output_hidden_states=True``)."""
    hidden = getattr(output, "hidden_states", None)
    if hidden is None:
        raise ValueError("Distillation(hidden_weight > 0) needs models that return hidden_states when called with "
                         "output_hidden_states=True (transformers models do)")
    return hidden


def distillation_loss(student_out: Any, teacher_out: Any, input_ids: Optional[torch.Tensor],
                      mask: Optional[torch.Tensor], how: Distillation) -> LossParts:
    """The loss of one micro-batch (module doc) from the two models' outputs; ``input_ids`` are
    needed for the language-model term, ``teacher_out`` when :attr:`Distillation.needs_teacher`.
    With only the hidden-state term the models need no logits (an encoder such as BERT)."""
    kl = lm = hidden = None
    if how.kl_weight > 0 or how.lm_weight > 0:
        s = logits_of(student_out)
    else:
        s = hidden_of(student_out)[-1]
    total = s.new_zeros((), dtype=torch.float32)
    if how.kl_weight > 0:
        t = logits_of(teacher_out).to(s.device)
        if t.shape != s.shape:
            raise ValueError(f"the teacher's logits have shape {tuple(t.shape)} and the student's {tuple(s.shape)}: "
                             "the teacher must take the same inputs and share the vocabulary")
        kl = kl_on_logits(s, t, how.temperature, mask)
        total = total + how.kl_weight * kl
    if how.lm_weight > 0:
        if input_ids is None:
            raise ValueError("Distillation(lm_weight > 0) needs token ids in the data (tensors of ids or "
                             "dicts with 'input_ids')")
        lm = next_token_loss(s, input_ids.to(s.device), mask)
        total = total + how.lm_weight * lm
    if how.hidden_weight > 0:
        hidden = hidden_state_loss(hidden_of(student_out), [h.to(s.device) for h in hidden_of(teacher_out)], mask)
        total = total + how.hidden_weight * hidden
    return LossParts(total, *(None if x is None else x.detach() for x in (kl, lm, hidden)))
