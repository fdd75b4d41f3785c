import copy
import io
import pickle

import pytest
import torch

import groupquant as gq
from groupquant.inject import ConfigError, UnknownSettingError
from groupquant.proxy import ActQuantProxy, BiasQuantProxy, WeightQuantProxy
from groupquant.quant_tensor import GroupwiseFloatQuantTensor, IntQuantTensor
from groupquant.quantizers import (Int8ActPerTensor, Int16BiasPerTensor, LearnedScaling, MXFloat4e2m1Weight,
                                   MXFloat8e4m3Act, MXInt8Weight)


class LearnedMXFP4(LearnedScaling, MXFloat4e2m1Weight):
    """Module-level so that pickling finds it."""


def test_weight_proxy_applies_prefixed_settings_and_returns_quant_tensor():
    w = torch.randn(8, 64)
    proxy = WeightQuantProxy(MXFloat4e2m1Weight, w.shape, {"group_size": 16}, "QuantLinear")
    q = proxy(w)
    assert isinstance(q, GroupwiseFloatQuantTensor) and q.group_size == 16
    assert torch.equal(q.value, gq.fake_quant(w, "fp4_e2m1", 16, 1))
    assert gq.describe(proxy)["group_size"] == 16


def test_unknown_setting_names_the_prefixed_keyword():
    with pytest.raises(UnknownSettingError, match="'weight_bitwidth' .* did you mean 'weight_bit_width'"):
        WeightQuantProxy(MXFloat4e2m1Weight, (8, 64), {"bitwidth": 4}, "QuantLinear")
    with pytest.raises(ValueError, match="'input_group_sise'"):
        ActQuantProxy(MXFloat8e4m3Act, "input_", -1, {"group_sise": 4}, "QuantLinear")


def test_misconfiguration_is_reported_when_the_proxy_builds():
    with pytest.raises(ConfigError) as info:
        WeightQuantProxy(MXFloat4e2m1Weight, (8, 64), {"bit_width": 8}, "QuantLinear")
    assert info.value.setting == "weight_bit_width" and str(info.value).startswith(
        "invalid setting 'weight_bit_width': QuantLinear:")


def test_not_a_quantizer():
    with pytest.raises(TypeError, match="weight_quant must be a quantizer class"):
        WeightQuantProxy("MXFloat4e2m1Weight", (8, 64))


def test_act_proxy_fills_the_layer_dim_only_where_the_quantizer_leaves_it():
    x = torch.randn(2, 64, 5)
    conv_like = ActQuantProxy(MXFloat8e4m3Act, "input_", 1)
    assert torch.equal(conv_like(x).value, gq.fake_quant(x, "fp8_e4m3", 32, 1))
    explicit = ActQuantProxy(MXFloat8e4m3Act, "input_", 1, {"group_dim": 2})
    assert explicit.quantizer.group_dim == 2


def test_float_proxy_passes_through():
    x = torch.randn(3)
    assert ActQuantProxy(None)(x) is x and not ActQuantProxy(None).is_quant_enabled


def test_bias_proxy_uses_dim_0_even_with_a_weight_quantizer():
    b = torch.randn(40)
    q = BiasQuantProxy(MXInt8Weight, b.shape)(b)
    assert torch.equal(q.value, gq.fake_quant(b, "int8", 32, 0))
    assert isinstance(BiasQuantProxy(Int16BiasPerTensor, b.shape)(b), IntQuantTensor)


def test_learned_weight_scale_is_sized_from_the_weight():
    proxy = WeightQuantProxy(LearnedMXFP4, (8, 70))
    assert proxy.tensor_quant.scale_impl.learned_scale.shape == (8, 3, 1)


@pytest.mark.parametrize("copier", ["deepcopy", "pickle", "torch.save"])
def test_proxies_copy_and_pickle(copier):
    proxy = WeightQuantProxy(LearnedMXFP4, (8, 64), {"group_size": 16})
    w = torch.randn(8, 64)
    proxy(w)
    if copier == "deepcopy":
        other = copy.deepcopy(proxy)
    elif copier == "pickle":
        other = pickle.loads(pickle.dumps(proxy))
    else:
        buffer = io.BytesIO()
        torch.save(proxy, buffer)
        buffer.seek(0)
        other = torch.load(buffer, weights_only=False)
    assert other.quantizer.group_size == 16 and torch.equal(other(w).value, proxy(w).value)


def test_running_stats_live_in_the_proxy_state_dict():
    proxy = ActQuantProxy(Int8ActPerTensor)
    proxy(torch.randn(10) * 3)
    assert set(proxy.state_dict()) == {"tensor_quant.scale_impl.running_stat", "tensor_quant.scale_impl.initialized"}
