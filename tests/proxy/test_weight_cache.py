"""The eval weight cache: reused while the weight holds the same bytes, dropped on any change,
writes through ``weight.data`` included (torch's version counter does not see them)."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import groupquant as gq
from groupquant.nn import QuantLinear
from groupquant.proxy.weight_cache import same_bytes
from groupquant.quantizers import MXFloat8e4m3Weight, MXInt8Weight


def _expected(layer, x):
    return torch.nn.functional.linear(x, gq.fake_quant(layer.weight.detach(), "fp8_e4m3", 32, 1), layer.bias)


@pytest.mark.parametrize("write", [lambda w: w.data.copy_(torch.randn_like(w)), lambda w: w.data.mul_(2.0),
                                   lambda w: w.data.neg_(), lambda w: w.data[3, 5].fill_(-0.0)],
                         ids=["data.copy_", "data.mul_", "data.neg_", "data.sign_of_one_zero"])
def test_eval_cache_sees_writes_through_data(write):
    """``.data`` writes leave the version counter alone; the cache must still drop its result."""
    layer = QuantLinear(64, 16, weight_quant=MXFloat8e4m3Weight).eval()
    with torch.no_grad():
        layer.weight[3, 5] = 0.0
    x = torch.randn(3, 64)
    with torch.no_grad():
        layer(x)  # fills the cache
        write(layer.weight)
        got = layer(x)
        quant = layer.quant_weight()
    expected_w = gq.fake_quant(layer.weight.detach(), "fp8_e4m3", 32, 1)
    assert torch.equal(got, torch.nn.functional.linear(x, expected_w, layer.bias))
    assert torch.equal(quant.value, expected_w)
    assert torch.equal(torch.signbit(quant.value), torch.signbit(expected_w))


def test_eval_cache_is_used_when_the_weight_holds_the_same_bytes():
    layer = QuantLinear(64, 16, weight_quant=MXInt8Weight).eval()
    calls = []
    layer.weight_quant.tensor_quant.register_forward_hook(lambda *a: calls.append(1))
    x = torch.randn(3, 64)
    with torch.no_grad():
        layer(x)
        layer.weight.data.copy_(layer.weight.detach().clone())  # a write, but the same bytes
        layer(x)
    assert len(calls) == 1


@settings(max_examples=25, deadline=None)
@given(row=st.integers(0, 15), col=st.integers(0, 63), value=st.floats(-1e3, 1e3, allow_nan=False, width=32),
       scale=st.sampled_from([0.5, 1.0, 3.0, -1.0]))
def test_any_write_through_data_is_seen(row, col, value, scale):
    torch.manual_seed(1)
    layer = QuantLinear(64, 16, weight_quant=MXFloat8e4m3Weight).eval()
    x = torch.randn(2, 64)
    with torch.no_grad():
        layer(x)
        layer.weight.data.mul_(scale)
        layer.weight.data[row, col] = value
        assert torch.equal(layer(x), _expected(layer, x))


def test_same_bytes_tells_signed_zeros_and_nan_payloads_apart():
    a = torch.tensor([0.0, 1.0])
    assert same_bytes(a, a.clone()) and not same_bytes(a, torch.tensor([-0.0, 1.0]))
    nan = torch.tensor([float("nan")])
    other = nan.view(torch.int32).add(1).view(torch.float32)
    assert torch.isnan(other).all() and same_bytes(nan, nan.clone()) and not same_bytes(nan, other)


def test_a_non_contiguous_weight_is_quantized_on_each_call_without_a_cache():
    layer = QuantLinear(64, 16, weight_quant=MXFloat8e4m3Weight).eval()
    layer.weight = torch.nn.Parameter(torch.randn(64, 16).t())  # a transposed view: not contiguous
    x = torch.randn(3, 64)
    with torch.no_grad():
        assert torch.equal(layer(x), _expected(layer, x))
    assert layer.weight_quant._cache is None


def test_a_weight_quantizer_switched_off_after_an_eval_call_keeps_no_cache():
    """Setting ``weight_quant.tensor_quant = None`` (quantization off) after the cache was filled
    gives the float weight, not the cached quantized one."""
    layer = QuantLinear(64, 16, weight_quant=MXFloat8e4m3Weight).eval()
    x = torch.randn(3, 64)
    with torch.no_grad():
        assert torch.equal(layer(x), _expected(layer, x))  # fills the cache
        layer.weight_quant.tensor_quant = None
        got = layer(x)
    assert torch.equal(got, torch.nn.functional.linear(x, layer.weight, layer.bias))
