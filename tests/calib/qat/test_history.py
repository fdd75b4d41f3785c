"""Early stopping: patience counts evaluations without a lower perplexity; restore gives the best parameters back."""
from __future__ import annotations

import torch

from groupquant.calib.qat.history import EarlyStopping, StepRecord, format_history


def test_patience_and_restore():
    p = torch.nn.Parameter(torch.zeros(2))
    stop = EarlyStopping([p], patience=2)
    assert stop.update(0, 10.0) is False
    with torch.no_grad():
        p.fill_(1.0)
    assert stop.update(5, 9.0) is False  # better: kept
    with torch.no_grad():
        p.fill_(2.0)
    assert stop.update(10, 9.5) is False  # one miss
    assert stop.update(15, 9.0) is True  # equal is no improvement: the second miss stops
    assert stop.restore() == 5 and torch.equal(p.detach(), torch.ones(2))
    assert EarlyStopping([p], patience=None).restore() is None


def test_history_table_lists_the_evaluations():
    table = format_history([StepRecord(0, None, None, 12.5), StepRecord(1, 0.5, 1e-3), StepRecord(2, 0.25, 1e-3, 11.0)])
    assert table.splitlines()[1].split() == ["0", "-", "-", "12.5000"]
    assert table.splitlines()[2].split() == ["2", "0.2500", "1.00e-03", "11.0000"]
    assert len(table.splitlines()) == 3
