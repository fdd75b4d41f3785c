"""Learned scales without a first call: set from the weight by the layer, stored with at least one
dim, re-read from buffers written in place (an in-place ``torch.distributed.checkpoint.load``)."""
import torch
from torch import nn

import groupquant as gq
from groupquant.core import LearnedScale, RunningStatsScale
from groupquant.nn import QuantLinear
from groupquant.quantizers import Int8ActPerTensor, LearnedScaling, MXFloat4e2m1Weight


class LearnedMXFP4(LearnedScaling, MXFloat4e2m1Weight):
    pass


class LearnedInt8Act(LearnedScaling, Int8ActPerTensor):
    pass


def _floor_exponents(w):
    """OCP floor rule for fp4_e2m1 (emax 2) over groups of 32 along dim 1, in float64."""
    amax = w.detach().double().reshape(w.shape[0], -1, 32).abs().amax(-1, keepdim=True)
    return (torch.floor(torch.log2(amax)) - 2).float()


def _scale(layer):
    return layer.weight_quant.tensor_quant.scale_impl


def test_weight_scale_is_set_from_the_weight_without_a_forward():
    layer = QuantLinear(64, 8, weight_quant=LearnedMXFP4)
    assert torch.equal(_scale(layer).learned_scale, _floor_exponents(layer.weight))


def test_quantize_model_sets_the_scale_from_the_weight_it_keeps():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 8))
    with torch.no_grad():
        model[0].weight.mul_(300.0)  # far from a fresh layer's init
    w = model[0].weight.detach().clone()
    gq.quantize_model(model, weight_quant=LearnedMXFP4)
    assert torch.equal(_scale(model[0]).learned_scale, _floor_exponents(w))


def test_a_weight_loaded_without_its_scales_sets_them_and_saved_scales_win():
    layer = QuantLinear(64, 8, weight_quant=LearnedMXFP4)
    w = torch.randn(8, 64) * 1000
    layer.load_state_dict({"weight": w, "bias": torch.zeros(8)}, strict=False)
    assert torch.equal(_scale(layer).learned_scale, _floor_exponents(w))
    saved = layer.state_dict()
    saved["weight_quant.tensor_quant.scale_impl.learned_scale"] = saved[
        "weight_quant.tensor_quant.scale_impl.learned_scale"] + 1
    other = QuantLinear(64, 8, weight_quant=LearnedMXFP4)
    other.load_state_dict(saved)
    assert torch.equal(_scale(other).learned_scale, _floor_exponents(w) + 1)


def test_per_tensor_scale_is_a_1_element_parameter_and_old_0d_state_dicts_load():
    layer = QuantLinear(16, 4, input_quant=LearnedInt8Act)
    x = torch.randn(3, 16) * 5
    out = layer(x)
    impl = layer.input_quant.tensor_quant.scale_impl
    assert impl.learned_scale.shape == (1,)
    assert impl(x).shape == ()  # the scale a per-tensor quantizer uses stays 0-d
    state = layer.state_dict()
    key = "input_quant.tensor_quant.scale_impl.learned_scale"
    state[key] = state[key].reshape(())  # as saved before
    fresh = QuantLinear(16, 4, input_quant=LearnedInt8Act)
    fresh.load_state_dict(state)
    assert torch.equal(fresh(x), out)


def test_buffers_written_in_place_are_read_again():
    """What an in-place checkpoint load does: the buffers change under the module."""
    spec = gq.quantizers.quantizer_spec(Int8ActPerTensor)
    trained, fresh = RunningStatsScale(spec), RunningStatsScale(spec)
    trained.train()
    trained(torch.randn(10) * 7)
    fresh.eval()
    for name, buf in trained.named_buffers():
        fresh.get_buffer(name).copy_(buf)
    trained.eval()
    probe = torch.randn(10)
    assert torch.equal(fresh(probe), trained(probe))
    learned_spec = gq.quantizers.quantizer_spec(LearnedInt8Act)
    a, b = LearnedScale(learned_spec, ()), LearnedScale(learned_spec, ())
    a(torch.randn(10) * 9)
    with torch.no_grad():
        for (_, src), (_, dst) in zip(a.state_dict(keep_vars=True).items(), b.state_dict(keep_vars=True).items()):
            dst.copy_(src)
    assert torch.equal(b(probe), a(probe))
