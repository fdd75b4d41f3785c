import io

import pytest
import torch
from torch import nn

import groupquant.quantizers as Q
from groupquant.export.checkpoints.packed_state_dict import load_packed_state_dict, packed_state_dict, unpacked_state_dict
from groupquant.nn import QuantConv2d, QuantIdentity, QuantLinear
from groupquant.quant_tensor import plain
from groupquant.quantizers.settings import RestrictScaling

WEIGHTS = [Q.MXInt8Weight, Q.MXFloat8e4m3Weight, Q.MXFloat8e5m2Weight, Q.MXFloat6e3m2Weight,
           Q.MXFloat6e2m3Weight, Q.MXFloat4e2m1Weight, Q.Int4WeightPerGroupFloat]


def quant_model(wq):
    torch.manual_seed(0)
    return nn.Sequential(QuantConv2d(3, 6, 3, weight_quant=wq, input_quant=Q.MXFloat8e4m3Act), nn.ReLU(),
                         nn.Flatten(), QuantLinear(6 * 16, 37, weight_quant=wq), nn.Linear(37, 3))


def float_twin():
    return nn.Sequential(nn.Conv2d(3, 6, 3), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 16, 37), nn.Linear(37, 3))


def saved(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def loaded(data):
    return torch.load(io.BytesIO(data), weights_only=True)


@pytest.mark.parametrize("wq", WEIGHTS, ids=lambda q: q.__name__)
def test_round_trip_into_quantized_and_float_models(wq):
    model = quant_model(wq).eval()
    sd = loaded(saved(packed_state_dict(model)))
    assert set(sd["packed"]) == {"0.weight", "3.weight"}
    x = torch.randn(2, 3, 6, 6)
    fresh = quant_model(wq)
    for p in fresh.parameters():
        p.data.zero_()
    load_packed_state_dict(fresh, sd)
    fresh.eval()
    with torch.no_grad():
        for a, b in ((model[0], fresh[0]), (model[3], fresh[3])):
            qa, qb = a.quant_weight().to_group_quantized(), b.quant_weight().to_group_quantized()
            assert torch.equal(qa.codes, qb.codes) and torch.equal(qa.scale, qb.scale)
        assert torch.equal(fresh(x), model(x))
        twin = float_twin()
        load_packed_state_dict(twin, sd)
        assert torch.equal(twin[0].weight, plain(model[0].quant_weight()))
        assert torch.equal(twin[3].weight, plain(model[3].quant_weight()))
        assert torch.equal(twin[4].weight, model[4].weight)


def test_mxfp4_file_is_about_4_25_over_32_of_float32():
    torch.manual_seed(0)
    model = nn.Sequential(QuantLinear(1024, 1024, weight_quant=Q.MXFloat4e2m1Weight),
                          QuantLinear(1024, 512, weight_quant=Q.MXFloat4e2m1Weight))
    ratio = len(saved(packed_state_dict(model))) / len(saved(model.state_dict()))
    assert 4.25 / 32 <= ratio < 4.25 / 32 * 1.02  # biases (float32) and file overhead on top


def test_quantizer_state_is_kept_for_quantized_models_and_skipped_for_float_twins():
    torch.manual_seed(0)
    model = nn.Sequential(QuantIdentity(input_quant=Q.Int8ActPerTensor), QuantLinear(8, 4, weight_quant=Q.MXInt8Weight))
    model.train()
    model(torch.randn(16, 8) * 5)  # running statistics move
    sd = packed_state_dict(model)
    assert sd["quantizer_keys"] and all(k.startswith("0.input_quant.") for k in sd["quantizer_keys"])
    fresh = nn.Sequential(QuantIdentity(input_quant=Q.Int8ActPerTensor), QuantLinear(8, 4, weight_quant=Q.MXInt8Weight))
    load_packed_state_dict(fresh, sd)
    for k in sd["quantizer_keys"]:
        assert torch.equal(fresh.state_dict()[k], model.state_dict()[k])
    load_packed_state_dict(nn.Sequential(nn.Identity(), nn.Linear(8, 4)), sd)


def test_unpacked_state_dict_and_errors():
    model = quant_model(Q.MXFloat6e2m3Weight)
    sd = packed_state_dict(model)
    plain_sd = unpacked_state_dict(sd)
    assert set(plain_sd) == set(model.state_dict())
    with pytest.raises(ValueError, match="not a packed state dict"):
        unpacked_state_dict(model.state_dict())
    with pytest.raises(ValueError, match="version"):
        unpacked_state_dict({**sd, "version": 99})
    with pytest.raises(RuntimeError, match="Unexpected key"):
        load_packed_state_dict(nn.Sequential(nn.Linear(2, 2)), sd)
    with pytest.raises(TypeError, match="nn.Module"):
        packed_state_dict(sd)


SCALE_FORMAT_WEIGHTS = {
    "nvfp4": Q.NVFP4Weight, "nvfp4_single_level": Q.NVFP4Weight.let(tensor_scale=False),
    "fp8_e5m0": Q.MXFloat8e4m3Weight.let(scale_format="e5m0"),
    "fp8_bf16": Q.MXFloat8e4m3Weight.let(scale_format="bf16", restrict_scaling_type=RestrictScaling.FP),
}


@pytest.mark.parametrize("name", SCALE_FORMAT_WEIGHTS)
def test_scale_formats_and_tensor_scales_round_trip_bit_for_bit(name):
    wq = SCALE_FORMAT_WEIGHTS[name]

    def model():
        return nn.Sequential(QuantLinear(64, 40, weight_quant=wq, input_quant=Q.NVFP4Act), nn.ReLU(),
                             QuantLinear(40, 8, weight_quant=wq))

    torch.manual_seed(0)
    m = model().eval()
    sd = loaded(saved(packed_state_dict(m)))
    fresh = model()
    load_packed_state_dict(fresh, sd)
    fresh.eval()
    x = torch.randn(3, 64)
    with torch.no_grad():
        for i in (0, 2):
            qa, qb = m[i].quant_weight().to_group_quantized(), fresh[i].quant_weight().to_group_quantized()
            assert qa.scale_format == qb.scale_format
            assert torch.equal(qa.codes, qb.codes) and torch.equal(qa.scale, qb.scale)
            assert (qa.tensor_scale is None) == (qb.tensor_scale is None) == (name != "nvfp4")
            assert qa.tensor_scale is None or torch.equal(qa.tensor_scale, qb.tensor_scale)
            assert torch.equal(unpacked_state_dict(sd)[f"{i}.weight"], plain(m[i].quant_weight()))
        assert torch.equal(fresh(x), m(x))


def test_nvfp4_file_is_about_4_5_over_32_of_float32():
    torch.manual_seed(0)
    model = nn.Sequential(QuantLinear(1024, 1024, weight_quant=Q.NVFP4Weight),
                          QuantLinear(1024, 512, weight_quant=Q.NVFP4Weight))
    sd = packed_state_dict(model)
    assert sd["packed"]["0.weight"]["scale"].dtype == torch.float8_e4m3fn
    ratio = len(saved(sd)) / len(saved(model.state_dict()))
    assert 4.5 / 32 <= ratio < 4.5 / 32 * 1.02


class TiedLM(nn.Module):
    """An embedding tied to a quantized output head (the usual language-model layout)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.embed = nn.Embedding(50, 32)
        self.head = QuantLinear(32, 50, bias=False, weight_quant=Q.NVFP4Weight)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(self.embed(ids))


def test_tied_embedding_keeps_its_float_values_and_is_stored_once():
    model = TiedLM().eval()
    sd = loaded(saved(packed_state_dict(model)))
    assert "head.weight" not in sd["packed"] and list(sd["tensors"]) == ["embed.weight"]
    fresh = TiedLM()
    with torch.no_grad():
        fresh.embed.weight.normal_()
    load_packed_state_dict(fresh, sd)
    assert fresh.head.weight is fresh.embed.weight  # tied stays tied
    assert torch.equal(fresh.embed.weight, model.embed.weight)  # float values, not NVFP4 values
    ids = torch.tensor([[3, 9, 49]])
    with torch.no_grad():
        assert torch.equal(fresh(ids), model(ids))


def test_module_registered_twice_is_stored_once_and_loads_quantized_into_the_float_twin():
    torch.manual_seed(5)
    lin = QuantLinear(64, 64, weight_quant=Q.MXFloat4e2m1Weight)
    model = nn.Sequential(lin, nn.ReLU(), lin).eval()
    sd = loaded(saved(packed_state_dict(model)))
    assert "2.weight" not in sd["tensors"] and list(sd["packed"]) == ["0.weight"]
    assert not any(t.is_floating_point() and t.numel() >= 64 * 64 for t in sd["tensors"].values())
    assert len(saved(sd)) < 64 * 64 * 4 / 2  # well under the float32 weight
    twin_lin = nn.Linear(64, 64)
    twin = nn.Sequential(twin_lin, nn.ReLU(), twin_lin)
    load_packed_state_dict(twin, sd)
    with torch.no_grad():
        assert torch.equal(twin[2].weight, lin.quant_weight().value)
        x = torch.randn(2, 64)
        assert torch.equal(twin(x), model(x))


def test_packed_weight_of_another_format_is_refused_by_a_quant_layer():
    torch.manual_seed(6)
    nvfp4 = nn.Sequential(QuantLinear(64, 16, weight_quant=Q.NVFP4Weight))
    mxfp4 = nn.Sequential(QuantLinear(64, 16, weight_quant=Q.MXFloat4e2m1Weight))
    before = mxfp4[0].weight.detach().clone()
    with pytest.raises(ValueError, match=r"^0: packed weight of format fp4_e2m1, scale_format ue4m3.*MXFloat4e2m1Weight"):
        load_packed_state_dict(mxfp4, packed_state_dict(nvfp4))
    assert torch.equal(mxfp4[0].weight, before)
    float_twin_layer = nn.Sequential(nn.Linear(64, 16))  # a float layer takes any packed weight
    load_packed_state_dict(float_twin_layer, packed_state_dict(nvfp4))
    assert torch.equal(float_twin_layer[0].weight, nvfp4[0].quant_weight().value)
