import copy
import math

import pytest
import torch
from torch import nn

pytest.importorskip("tqdm", reason="training progress bars need tqdm (the demo extra)")

import groupquant as gq  # noqa: E402
from groupquant.demo.training import TrainConfig, evaluate, gradient_sqnr_db, train_classifier  # noqa: E402


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


def test_gradient_sqnr_by_hand_and_models_left_as_they_were():
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(4, 3, bias=False))
    b = nn.Sequential(nn.Linear(4, 3, bias=False))
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    with torch.no_grad():
        b[0].weight.copy_(a[0].weight)
    a.eval()
    assert math.isinf(gradient_sqnr_db(a, b, x, y))  # same weights, same gradients
    # logits scaled by 3 in b: its weight gradient differs; the SQNR by hand from both gradients
    b3 = nn.Sequential(b[0], _Scale(3.0))
    grad = torch.autograd.grad(torch.nn.functional.cross_entropy(a(x), y), a[0].weight)[0]
    grad3 = torch.autograd.grad(torch.nn.functional.cross_entropy(b3(x), y), b[0].weight)[0]
    expected = 10 * math.log10(float(grad.double().pow(2).sum() / (grad.double() - grad3.double()).pow(2).sum()))
    assert gradient_sqnr_db(a, b3, x, y) == pytest.approx(expected, rel=1e-9)
    assert not a.training and b3.training  # each keeps its mode
    assert a[0].weight.grad is None and b[0].weight.grad is None  # .grad untouched
    with pytest.raises(ValueError, match="do not match"):
        gradient_sqnr_db(a, nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 3)), x, y)


def test_gradient_sqnr_of_quantized_copies_falls_with_the_bits():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
    sqnr = {name: gradient_sqnr_db(model, gq.quantize_model(copy.deepcopy(model), recipe=name), x, y)
            for name in ("mxint8", "mxfp8", "mxfp4")}
    assert sqnr["mxint8"] > sqnr["mxfp8"] > sqnr["mxfp4"] > 0


class _Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor
