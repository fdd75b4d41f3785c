"""pack_model / PackedLinear / unpack_model: packed inference computes what the fake-quant layer
computes, loads packed state dicts straight in, and refuses what it cannot take by name."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import groupquant as gq
from groupquant.export import (PackedLinear, PackError, load_packed_state_dict, packed_layers, packed_state_dict,
                               unpack_model)
from groupquant.nn import QuantLinear
from groupquant.quantizers import (Int4WeightPerGroupFloat, Int8WeightPerTensor, MXFloat4e2m1Weight,
                                   MXFloat6e2m3Weight, MXFloat6e3m2Weight, MXFloat8e4m3Act, MXFloat8e4m3Weight,
                                   MXFloat8e5m2Weight, MXInt8Weight, NVFP4Act, NVFP4Weight)


class MXInt4Weight(MXInt8Weight):
    bit_width = 4


WEIGHTS = [MXFloat4e2m1Weight, MXFloat6e2m3Weight, MXFloat6e3m2Weight, MXFloat8e4m3Weight, MXFloat8e5m2Weight,
           MXInt8Weight, MXInt4Weight, NVFP4Weight, NVFP4Weight.let(tensor_scale=False),
           MXFloat8e4m3Weight.let(scale_format="e5m0")]


def rel_err(y, ref):
    return float((y.float() - ref.float()).norm() / ref.float().norm())


def model(weight_quant, in_features=70, dtype=torch.float32):
    torch.manual_seed(0)
    return nn.Sequential(
        QuantLinear(in_features, 48, weight_quant=weight_quant, input_quant=MXFloat8e4m3Act, dtype=dtype), nn.ReLU(),
        QuantLinear(48, 10, bias=False, weight_quant=weight_quant, dtype=dtype)).eval()


@pytest.mark.parametrize("weight_quant", WEIGHTS, ids=lambda q: q.__name__)
@pytest.mark.parametrize("rows", [1, 5, 33, 256])
def test_packed_model_computes_the_fake_quant_model(weight_quant, rows):
    m = model(weight_quant)
    x = torch.randn(rows, 70)
    with torch.no_grad():
        ref_layer = m[0]
        xq = ref_layer.input_quant.quant_value(x)
        w = ref_layer.quant_weight().value
        ref0 = F.linear(xq.double(), w.double(), ref_layer.bias.double())
        ref = m(x)
        pm = gq.pack_model(copy.deepcopy(m))
        assert isinstance(pm[0], PackedLinear) and isinstance(pm[2], PackedLinear)
        assert rel_err(pm[0](x), ref0) < 1e-5
        assert rel_err(pm(x), ref) < 1e-5
        assert torch.equal(pm[0].dequantized_weight(), w)


@pytest.mark.parametrize("weight_quant", [MXFloat4e2m1Weight, MXFloat8e4m3Weight, MXInt8Weight, NVFP4Weight],
                         ids=lambda q: q.__name__)
def test_bfloat16_model(weight_quant):
    m = model(weight_quant, dtype=torch.bfloat16)
    x = torch.randn(9, 70, dtype=torch.bfloat16)
    with torch.no_grad():
        layer = m[0]
        ref = F.linear(layer.input_quant.quant_value(x).float(), layer.quant_weight().value.float(),
                       layer.bias.float()).to(torch.bfloat16)
        pm = gq.pack_model(copy.deepcopy(m))
        y = pm[0](x)
    assert y.dtype == torch.bfloat16
    assert rel_err(y, ref) < 2.0 ** -8


def test_mxfp4_state_is_at_most_0_14_of_float32():
    m = nn.Sequential(QuantLinear(1024, 512, weight_quant=MXFloat4e2m1Weight))
    float_bytes = sum(t.numel() * 4 for t in m.state_dict().values())
    pm = gq.pack_model(m)
    packed_bytes = sum(t.numel() * t.element_size() for t in pm.state_dict().values())
    assert packed_bytes <= 0.14 * float_bytes
    assert not any(t.is_floating_point() and t.numel() >= 1024 * 512 for t in pm.state_dict().values())


def test_state_dict_round_trip_into_packed_model_and_back():
    m = model(MXFloat4e2m1Weight)
    sd = packed_state_dict(m)
    pm = gq.pack_model(copy.deepcopy(model(MXFloat4e2m1Weight, in_features=70)))
    for _, layer in packed_layers(pm):
        layer.weight_codes.zero_()
    load_packed_state_dict(pm, sd)
    x = torch.randn(4, 70)
    with torch.no_grad():
        assert rel_err(pm(x), m(x)) < 1e-5
    sd2 = packed_state_dict(pm)
    assert sd2["packed"].keys() == sd["packed"].keys() and sd2["tensors"].keys() == sd["tensors"].keys()
    for key in sd["packed"]:
        assert torch.equal(sd2["packed"][key]["data"].view(torch.uint8), sd["packed"][key]["data"].view(torch.uint8))
    back = unpack_model(pm)
    assert isinstance(back[0], QuantLinear)
    with torch.no_grad():
        assert torch.equal(back(x), m(x))
    back.train()
    back(x).sum().backward()  # trainable again
    assert back[0].weight.grad is not None


def test_nvfp4_model_with_nvfp4_inputs_packs_and_round_trips():
    """NVFP4 weights (UE4M3 scale bytes and the per-tensor scale in the kernel) and NVFP4 inputs; the
    packed state dict and torch's own state dict load into the packed model with their tensor scale."""
    torch.manual_seed(1)
    m = nn.Sequential(QuantLinear(70, 48, weight_quant=NVFP4Weight, input_quant=NVFP4Act), nn.ReLU(),
                      QuantLinear(48, 10, weight_quant=NVFP4Weight, input_quant=NVFP4Act)).eval()
    x = torch.randn(6, 70) * 5
    with torch.no_grad():
        ref = m(x)
        pm = gq.pack_model(copy.deepcopy(m))
        assert pm[0].scale_format.name == "ue4m3" and pm[0].weight_tensor_scale is not None
        assert rel_err(pm(x), ref) < 1e-5
        assert torch.equal(pm[0].dequantized_weight(), m[0].quant_weight().value)
        assert pm[0].nbytes == 48 * 80 // 2 + 48 * 5 + 48 * 4 + 4  # codes (5 padded blocks of 16), UE4M3 bytes, bias, g
        other = nn.Sequential(QuantLinear(70, 48, weight_quant=NVFP4Weight, input_quant=NVFP4Act), nn.ReLU(),
                              QuantLinear(48, 10, weight_quant=NVFP4Weight, input_quant=NVFP4Act)).eval()
        packed_other = gq.pack_model(other)
        load_packed_state_dict(packed_other, packed_state_dict(m))
        assert torch.equal(packed_other(x), pm(x))
        fresh = gq.pack_model(copy.deepcopy(other))
        fresh.load_state_dict(pm.state_dict())  # the kernel record follows the loaded tensor scale
        assert torch.equal(fresh(x), pm(x))
        assert torch.equal(unpack_model(copy.deepcopy(pm))(x), ref)
    with pytest.raises(PackError, match=r"^0: .*scale_format"):
        load_packed_state_dict(gq.pack_model(copy.deepcopy(m)), packed_state_dict(model(NVFP4Weight.let(
            tensor_scale=False))))


def test_load_of_another_format_or_shape_names_the_layer():
    pm = gq.pack_model(model(MXFloat4e2m1Weight))
    with pytest.raises(PackError, match=r"^0: .*fp8_e4m3"):
        load_packed_state_dict(pm, packed_state_dict(model(MXFloat8e4m3Weight)))
    with pytest.raises(PackError, match=r"^0: .*shape"):
        load_packed_state_dict(pm, packed_state_dict(model(MXFloat4e2m1Weight, in_features=64)))


@pytest.mark.parametrize("weight_quant,setting", [(Int8WeightPerTensor, "not group-wise"),
                                                  (Int4WeightPerGroupFloat, "float scales")])
def test_unsupported_weight_quantizers_are_named(weight_quant, setting):
    m = nn.Sequential(nn.Linear(4, 4), QuantLinear(64, 8, weight_quant=weight_quant))
    with pytest.raises(PackError, match=rf"^1: .*{setting}"):
        gq.pack_model(m)
    with pytest.warns(UserWarning, match=rf"'1' stays fake-quant \(skip_unsupported\): 1: .*{setting}"):
        kept = gq.pack_model(m, skip_unsupported=True)
    assert isinstance(kept[1], QuantLinear)


def test_a_quant_layer_the_packer_does_not_know_stays_fake_quant_with_a_warning_naming_it():
    from groupquant.nn import QuantConv2d
    torch.manual_seed(6)
    m = nn.Sequential(QuantConv2d(3, 4, 3, weight_quant=MXFloat4e2m1Weight), nn.Flatten(),
                      QuantLinear(64, 8, weight_quant=MXFloat4e2m1Weight)).eval()
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        ref = m(x)
    with pytest.warns(UserWarning, match=r"'0' \(QuantConv2d\) stays fake-quant: the packer packs QuantLinear"):
        pm = gq.pack_model(m)
    assert type(pm[0]) is QuantConv2d and isinstance(pm[2], PackedLinear)
    with torch.no_grad():
        assert rel_err(pm(x), ref) < 1e-5


def test_float_layers_stay_and_bad_dtype_is_named():
    m = nn.Sequential(QuantLinear(64, 8), QuantLinear(8, 8, weight_quant=MXFloat8e4m3Weight))
    pm = gq.pack_model(m)
    assert isinstance(pm[0], QuantLinear) and isinstance(pm[1], PackedLinear)
    with pytest.raises(TypeError, match=r"^1: .*float64"):
        pm[1](torch.randn(2, 8, dtype=torch.float64))


def test_root_layer_is_replaced():
    layer = QuantLinear(64, 8, weight_quant=MXFloat4e2m1Weight)
    assert isinstance(gq.pack_model(layer), PackedLinear)


def test_packed_model_compiles():
    pm = gq.pack_model(nn.Sequential(QuantLinear(64, 32, weight_quant=MXFloat4e2m1Weight)).eval())
    x = torch.randn(3, 64)
    with torch.no_grad():
        assert torch.equal(torch.compile(pm, fullgraph=True)(x), pm(x))


class TiedLM(nn.Module):
    """An embedding tied to a quantized output head (the usual language-model layout)."""

    def __init__(self, weight_quant=NVFP4Weight):
        super().__init__()
        torch.manual_seed(2)
        self.embed = nn.Embedding(50, 32)
        self.body = QuantLinear(32, 32, weight_quant=MXFloat4e2m1Weight)
        self.head = QuantLinear(32, 50, bias=False, weight_quant=weight_quant)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.relu(self.body(self.embed(ids))))


def test_tied_weight_stays_tied_and_float_through_pack_model():
    m = TiedLM().eval()
    ids = torch.tensor([[1, 7, 49]])
    with torch.no_grad():
        ref = m(ids)
    emb = m.embed.weight.detach().clone()
    with pytest.warns(UserWarning, match="'head' stays a QuantLinear: its weight is tied to 'embed.weight'"):
        pm = gq.pack_model(m)
    assert isinstance(pm.body, PackedLinear) and isinstance(pm.head, QuantLinear)
    assert pm.head.weight is pm.embed.weight and torch.equal(pm.embed.weight, emb)
    with torch.no_grad():
        assert rel_err(pm(ids), ref) < 1e-5


def test_a_layer_registered_twice_is_packed_once_and_stays_shared():
    torch.manual_seed(4)
    lin = QuantLinear(32, 32, weight_quant=MXFloat4e2m1Weight)
    m = nn.Sequential(lin, nn.ReLU(), lin).eval()
    x = torch.randn(3, 32)
    with torch.no_grad():
        ref = m(x)
        pm = gq.pack_model(m)
        assert isinstance(pm[0], PackedLinear) and pm[2] is pm[0]
        assert rel_err(pm(x), ref) < 1e-5
        sd = packed_state_dict(pm)
        assert list(sd["packed"]) == ["0.weight"] and sd["aliases"]["2.weight"] == "0.weight"
        other_lin = QuantLinear(32, 32, weight_quant=MXFloat4e2m1Weight)
        other = gq.pack_model(nn.Sequential(other_lin, nn.ReLU(), other_lin))
        load_packed_state_dict(other, sd)  # strict: every name of the shared layer is loaded
        assert torch.equal(other(x), pm(x))
        back = unpack_model(pm)
        assert isinstance(back[0], QuantLinear) and back[2] is back[0]


def test_a_float_model_is_refused_by_name():
    with pytest.raises(PackError, match="Sequential has no QuantLinear with a weight quantizer"):
        gq.pack_model(nn.Sequential(nn.Linear(4, 4), QuantLinear(4, 4)))


def test_progress_bar_is_switchable(capsys):
    tqdm = pytest.importorskip("tqdm")
    m = nn.Sequential(*[QuantLinear(32, 32, weight_quant=MXFloat4e2m1Weight) for _ in range(3)])
    gq.pack_model(copy.deepcopy(m), progress=True)
    assert "pack_model" in capsys.readouterr().err
    gq.pack_model(copy.deepcopy(m))  # 3 layers: no bar by default
    assert "pack_model" not in capsys.readouterr().err
