import torch

from groupquant.core import round_ste


def test_round_ste_forward_and_identity_gradient():
    x = torch.tensor([0.5, 1.5, -2.4], requires_grad=True)
    y = round_ste(x)
    assert y.tolist() == [0.0, 2.0, -2.0]
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 1.0]
