"""Quant tensors act as their dequantized value in torch code, and gradients flow."""
import pytest
import torch
import torch.nn.functional as F

from groupquant.core import build_tensor_quant
from groupquant.quant_tensor import GroupwiseFloatQuantTensor, IntQuantTensor, quant_tensor_from_output
from groupquant.quantizers import Int8WeightPerChannel, MXFloat4e2m1Weight, quantizer_spec


def _quant(q, w):
    spec = quantizer_spec(q).with_dims(1, 0)  # a weight: groups along dim 1, channels along dim 0
    return quant_tensor_from_output(build_tensor_quant(spec)(w), spec)


@pytest.fixture(params=[MXFloat4e2m1Weight, Int8WeightPerChannel])
def pair(request):
    w = torch.randn(6, 40, requires_grad=True)
    return w, _quant(request.param, w)


def test_torch_functions_see_the_value(pair):
    w, q = pair
    v = q.value.detach()
    x = torch.randn(3, 40)
    assert torch.equal(F.linear(x, q), F.linear(x, v))
    assert torch.equal(torch.matmul(x, q.t()), x @ v.t())
    assert torch.equal(torch.cat([q, q]), torch.cat([v, v]))
    assert torch.equal(torch.relu(q), torch.relu(v))


def test_operators_and_attributes(pair):
    w, q = pair
    v = q.value.detach()
    assert torch.equal(q + 1, v + 1) and torch.equal(1 - q, 1 - v) and torch.equal(2 * q, 2 * v)
    assert torch.equal(-q, -v) and torch.equal(abs(q), v.abs()) and torch.equal(q / 2, v / 2)
    assert torch.equal(q + q, 2 * v) and torch.equal(torch.ones(6, 40) + q, 1 + v)
    assert torch.equal(q @ torch.ones(40), v @ torch.ones(40)) and torch.equal(q ** 2, v ** 2)
    assert torch.equal(q > 0, v > 0) and torch.equal(q[0], v[0])
    assert q.shape == (6, 40) and q.ndim == 2 and q.size(1) == 40 and len(q) == 6 and q.dim() == 2
    assert q.dtype == torch.float32 and q.device.type == "cpu" and q.requires_grad
    assert torch.equal(q.sum(), v.sum()) and q.reshape(-1).shape == (240,)


def test_gradients_flow_to_the_source(pair):
    w, q = pair
    (F.linear(torch.ones(2, 40), q).sum() + (q * 3).sum() + abs(q).sum()).backward()
    assert w.grad is not None and torch.isfinite(w.grad).all() and w.grad.abs().sum() > 0


def test_detach_to_clone_keep_the_kind(pair):
    w, q = pair
    d = q.detach()
    assert type(d) is type(q) and not d.requires_grad and torch.equal(d.value, q.value.detach())
    half = q.to(torch.bfloat16)
    assert type(half) is type(q) and half.dtype == torch.bfloat16
    scale = half.scale_ if isinstance(q, GroupwiseFloatQuantTensor) else half.scale
    assert scale.dtype == torch.float32
    c = q.clone().cpu()
    assert torch.equal(c.value, q.value)
    # the format object and the flags travel unchanged (never rebuilt)
    for other in (d, half, c):
        assert other.fmt is q.fmt and other.training == q.training


def test_private_attributes_are_not_forwarded():
    q = _quant(Int8WeightPerChannel, torch.randn(2, 3))
    assert isinstance(q, IntQuantTensor)
    with pytest.raises(AttributeError):
        q._private
