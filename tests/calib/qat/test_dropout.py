"""dropout_off: every torch dropout module's probability is 0 inside and its own afterwards."""
from __future__ import annotations

import torch
from torch import nn

from groupquant.calib.qat.dropout import dropout_off


def test_inside_the_training_forward_is_the_deterministic_one_and_probabilities_come_back():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.3), nn.Linear(8, 8), nn.AlphaDropout(0.5)).train()
    x = torch.randn(4, 8)
    with torch.no_grad():
        reference = model.eval()(x)
        model.train()
        assert not torch.equal(model(x), reference)  # dropout acts in training mode
        with dropout_off(model) as count:
            assert count == 2 and model.training
            assert torch.equal(model(x), reference)
        assert [m.p for m in model if isinstance(m, (nn.Dropout, nn.AlphaDropout))] == [0.3, 0.5]
        with dropout_off(model, enabled=False) as count:
            assert count == 0 and model[1].p == 0.3
