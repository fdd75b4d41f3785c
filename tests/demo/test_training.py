import pytest
import torch
from torch import nn

pytest.importorskip("tqdm", reason="training progress bars need tqdm (the demo extra)")

from groupquant.demo.training import TrainConfig, evaluate, train_classifier  # noqa: E402


def test_training_fits_a_separable_problem():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(200, 4, generator=gen)
    y = (x[:, 0] > 0).long()
    model = nn.Linear(4, 2)
    before = evaluate(model, x, y)
    history = train_classifier(model, x, y, TrainConfig(epochs=20, lr=0.05, progress=False))
    after = evaluate(model, x, y)
    assert len(history.epoch_loss) == 20
    assert history.epoch_loss[-1] < history.epoch_loss[0]
    assert after.loss < before.loss and after.accuracy >= 0.95
    assert not model.training


def test_evaluate_by_hand():
    model = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    y = torch.tensor([0, 1, 1, 0])
    ev = evaluate(model, x, y)
    assert ev.accuracy == 0.75  # the last row ties: argmax picks class 0
    logsumexp = torch.log(torch.exp(torch.tensor(1.0)) + 1)
    # rows 1-2 right (loss lse - 1), row 3 wrong (lse - 0), row 4 all-zero logits (log 2)
    expected = (2 * (logsumexp - 1) + logsumexp + torch.log(torch.tensor(2.0))) / 4
    assert ev.loss == pytest.approx(float(expected), rel=1e-6)


@pytest.mark.parametrize("kwargs, name", [({"epochs": -1}, "epochs"), ({"batch_size": 0}, "batch_size"),
                                          ({"lr": 0.0}, "lr"), ({"epochs": 1.5}, "epochs")])
def test_bad_config_names_the_setting(kwargs, name):
    with pytest.raises(ValueError, match=name):
        TrainConfig(**kwargs)


def test_mismatched_rows_are_rejected():
    with pytest.raises(ValueError, match="rows"):
        train_classifier(nn.Linear(2, 2), torch.zeros(3, 2), torch.zeros(2, dtype=torch.long), TrainConfig(progress=False))
