"""QAT on a real data set (scikit-learn's digits): MXFP4 weights + MXFP8 activations train to
within a few points of float accuracy; learned scales move; gradients stay finite."""
import pytest
import torch
from torch import nn

from groupquant.nn import QuantLinear
from groupquant.quantizers import LearnedScaling, MXFloat4e2m1Weight, MXFloat8e4m3Act

datasets = pytest.importorskip("sklearn.datasets")


class LearnedMXFloat4e2m1Weight(LearnedScaling, MXFloat4e2m1Weight):
    """MXFP4 weights whose E8M0 group scales are learned (initialised by the OCP floor rule)."""


def _digits():
    data = datasets.load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    x, y = x[order], y[order]
    return (x[:1400], y[:1400]), (x[1400:], y[1400:])


def _model(quant: bool) -> nn.Module:
    if not quant:
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(
        QuantLinear(64, 128, weight_quant=LearnedMXFloat4e2m1Weight, input_quant=MXFloat8e4m3Act),
        nn.ReLU(),
        QuantLinear(128, 10, weight_quant=MXFloat4e2m1Weight, input_quant=MXFloat8e4m3Act))


def _train(model: nn.Module, train, epochs: int = 8) -> None:
    x, y = train
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=gen).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            for p in model.parameters():
                assert torch.isfinite(p.grad).all()
            opt.step()


def _accuracy(model: nn.Module, test) -> float:
    model.eval()
    with torch.no_grad():
        return (model(test[0]).argmax(dim=1) == test[1]).float().mean().item()


def test_mxfp4_mxfp8_qat_on_digits_is_close_to_float(one_thread):
    train, test = _digits()
    torch.manual_seed(0)
    float_model = _model(False)
    torch.manual_seed(0)
    quant_model = _model(True)
    quant_model(train[0][:1])  # the first call initialises the learned scales from the weights
    learned = quant_model[0].weight_quant.tensor_quant.scale_impl.learned_scale
    start = learned.detach().clone()
    _train(float_model, train)
    _train(quant_model, train)
    float_acc, quant_acc = _accuracy(float_model, test), _accuracy(quant_model, test)
    assert float_acc > 0.93
    print(f"digits test accuracy: float {float_acc:.3f}, MXFP4 weights + MXFP8 activations {quant_acc:.3f}")
    assert quant_acc > float_acc - 0.04, (float_acc, quant_acc)
    assert not torch.equal(learned.detach(), start)  # the learned exponents moved ...
    assert not torch.equal(learned.detach().round(), start.round())  # ... enough to change some scales
