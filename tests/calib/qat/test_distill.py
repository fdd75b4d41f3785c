"""The distillation loss against float64 references written from the definitions."""
from __future__ import annotations

import math

import pytest
import torch

from groupquant.calib.qat.distill import (Distillation, distillation_loss, hidden_state_loss, kl_on_logits,
                                      next_token_loss)


def _kl_reference(student, teacher, temperature, mask=None):
    """sum_v p_t(v) (log p_t(v) - log p_s(v)) per position, in float64 from exp / sum, masked mean, times T^2."""
    s, t = student.double() / temperature, teacher.double() / temperature
    p_s = torch.exp(s - s.max(-1, keepdim=True).values)
    p_s = p_s / p_s.sum(-1, keepdim=True)
    p_t = torch.exp(t - t.max(-1, keepdim=True).values)
    p_t = p_t / p_t.sum(-1, keepdim=True)
    per = (p_t * (torch.log(p_t) - torch.log(p_s))).sum(-1)
    keep = torch.ones_like(per) if mask is None else mask.double()
    return float((per * keep).sum() / keep.sum()) * temperature ** 2


@pytest.mark.parametrize("temperature", [1.0, 2.0, 0.5])
def test_kl_matches_the_definition(temperature):
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(2, 5, 11, generator=g), torch.randn(2, 5, 11, generator=g) * 3
    assert kl_on_logits(s, t, temperature).item() == pytest.approx(_kl_reference(s, t, temperature), rel=1e-5)
    assert kl_on_logits(t, t, temperature).item() == pytest.approx(0.0, abs=1e-6)


def test_kl_mask_drops_positions_and_bfloat16_logits_are_computed_in_float32():
    g = torch.Generator().manual_seed(1)
    s, t = torch.randn(2, 6, 7, generator=g), torch.randn(2, 6, 7, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    got = kl_on_logits(s, t, 1.0, mask).item()
    assert got == pytest.approx(_kl_reference(s, t, 1.0, mask), rel=1e-5)
    assert got != pytest.approx(_kl_reference(s, t, 1.0), rel=1e-3)
    low = kl_on_logits(s.bfloat16(), t.bfloat16())
    assert low.dtype == torch.float32
    assert low.item() == pytest.approx(_kl_reference(s.bfloat16().float(), t.bfloat16().float(), 1.0), rel=1e-5)


def test_next_token_loss_predicts_the_following_token():
    g = torch.Generator().manual_seed(2)
    logits, ids = torch.randn(2, 5, 9, generator=g), torch.randint(0, 9, (2, 5), generator=g)
    logp = torch.log_softmax(logits.double(), -1)
    want = -sum(float(logp[b, i, ids[b, i + 1]]) for b in range(2) for i in range(4)) / 8
    assert next_token_loss(logits, ids).item() == pytest.approx(want, rel=1e-6)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])  # targets 3, 4 of row 0 are padding
    kept = [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (1, 3)]
    want = -sum(float(logp[b, i, ids[b, i + 1]]) for b, i in kept) / len(kept)
    assert next_token_loss(logits, ids, mask).item() == pytest.approx(want, rel=1e-6)


def test_hidden_state_loss_is_the_mean_relative_squared_error():
    g = torch.Generator().manual_seed(3)
    t = [torch.randn(2, 3, 4, generator=g) for _ in range(3)]
    s = [x + 0.1 * torch.randn(2, 3, 4, generator=g) for x in t]
    want = sum(float((a.double() - b.double()).pow(2).sum() / b.double().pow(2).sum()) for a, b in zip(s, t)) / 3
    assert hidden_state_loss(s, t).item() == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="the student gives 2 hidden states and the teacher 3"):
        hidden_state_loss(s[:2], t)


def test_hidden_state_loss_with_a_mask_leaves_padding_out():
    g = torch.Generator().manual_seed(5)
    t = [torch.randn(2, 4, 3, generator=g) * 2 ** torch.arange(-3, 3.0)[:3] for _ in range(2)]
    s = [x + 0.2 * torch.randn(2, 4, 3, generator=g) for x in t]
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])
    kept = [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    want = sum(sum(float((a[b, i].double() - c[b, i].double()).pow(2).sum()) for b, i in kept)
               / sum(float(c[b, i].double().pow(2).sum()) for b, i in kept) for a, c in zip(s, t)) / 2
    assert hidden_state_loss(s, t, mask).item() == pytest.approx(want, rel=1e-5)
    padded = [x.clone() for x in s]
    padded[0][0, 3] += 1e3  # a padding position: no effect
    assert hidden_state_loss(padded, t, mask).item() == pytest.approx(want, rel=1e-5)
    assert hidden_state_loss(padded, t).item() > 10 * want


def test_hidden_states_alone_need_no_logits():
    g = torch.Generator().manual_seed(6)
    t = [torch.randn(1, 3, 4, generator=g) for _ in range(2)]
    s = [x + 0.1 for x in t]

    class Out:  # an encoder's output: hidden states, no logits
        def __init__(self, hidden):
            self.hidden_states = hidden
    parts = distillation_loss(Out(s), Out(t), None, None, Distillation(kl_weight=0.0, hidden_weight=2.0))
    assert parts.kl is None and parts.lm is None
    assert parts.total.item() == pytest.approx(2 * hidden_state_loss(s, t).item(), rel=1e-6)
    with pytest.raises(TypeError, match="no logits"):
        distillation_loss(Out(s), Out(t), None, None, Distillation(kl_weight=1.0, hidden_weight=1.0))


def test_the_total_mixes_the_terms_by_their_weights():
    g = torch.Generator().manual_seed(4)
    s, t = torch.randn(1, 4, 6, generator=g), torch.randn(1, 4, 6, generator=g)
    ids = torch.randint(0, 6, (1, 4), generator=g)
    how = Distillation(temperature=2.0, kl_weight=0.5, lm_weight=0.25)
    parts = distillation_loss(s, t, ids, None, how)
    assert parts.hidden is None
    assert parts.total.item() == pytest.approx(0.5 * kl_on_logits(s, t, 2.0).item() + 0.25 * next_token_loss(s, ids).item(),
                                               rel=1e-6)
    with pytest.raises(ValueError, match="the teacher's logits have shape \\(1, 4, 7\\) and the student's \\(1, 4, 6\\)"):
        distillation_loss(s, torch.randn(1, 4, 7), ids, None, how)
    with pytest.raises(ValueError, match="lm_weight > 0\\) needs token ids"):
        distillation_loss(s, t, None, None, how)


@pytest.mark.parametrize("kwargs,match", [
    (dict(temperature=0.0), "temperature must be a finite number > 0"),
    (dict(temperature=math.inf), "temperature must be a finite number > 0"),
    (dict(kl_weight=-1.0), "kl_weight must be a finite number >= 0"),
    (dict(lm_weight=math.nan), "lm_weight must be a finite number >= 0"),
    (dict(kl_weight=0.0), "all 0; nothing would be trained"),
])
def test_bad_settings_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Distillation(**kwargs)
