"""PackedLinear's one record (export/inference/packed_linear_state.py): casts keep its float32
tensors bit for bit, the state dict keeps the keys of the buffers it replaced and loads bit for
bit, and the kernel's view of the weight is made once, and again only after a change."""
import copy

import pytest
import torch
import torch.nn.functional as F

import groupquant as gq
import groupquant.quantizers as Q
from groupquant.export import PackedLinear
from groupquant.nn import QuantLinear

#: the entries of the buffers PackedLinear had before its record, in their order (saved files hold these)
OLD_KEYS = ["weight_codes", "weight_scale", "bias", "weight_tensor_scale"]


def quant_layer(wq=Q.NVFP4Weight, seed=0, **kw):
    torch.manual_seed(seed)
    layer = QuantLinear(40, 12, weight_quant=wq, **kw).eval()
    with torch.no_grad():  # a bias and weight whose rounding to bfloat16 is visible
        layer.bias.copy_(torch.randn(12) + 2.0 ** -12)
        layer.weight.mul_(3.0).add_(2.0 ** -11)
    return layer


def bits(t):
    """The tensor's bytes (equal bits, NaN payloads and signed zeros included)."""
    return t.detach().reshape(-1).contiguous().view(torch.uint8)


def linear_ref(layer, x):
    """F.linear of ``x`` with the quant layer's fake-quant weight and its bias, in float64."""
    return F.linear(x.double(), layer.quant_weight().value.detach().double(), layer.bias.detach().double())


@pytest.mark.parametrize("cast", ["to_bf16", "half", "bfloat16"])
def test_a_cast_keeps_the_records_float32_tensors_and_forward_is_the_quant_layers(cast):
    layer = quant_layer(Q.NVFP4Weight)
    packed = gq.pack_model(copy.deepcopy(layer))
    before = {n: t.clone() for n, t in packed.state.tensors().items()}
    packed = {"to_bf16": lambda m: m.to(torch.bfloat16), "half": lambda m: m.half(),
              "bfloat16": lambda m: m.bfloat16()}[cast](packed)
    after = packed.state.tensors()
    for name, t in before.items():  # codes, scale bytes, tables, tensor scale, bias: dtype and bits kept
        assert after[name].dtype == t.dtype and torch.equal(bits(after[name]), bits(t)), name
    assert packed.state.tensor_scale.dtype == torch.float32 and packed.state.bias.dtype == torch.float32
    assert packed.weight_dtype == (torch.float16 if cast == "half" else torch.bfloat16)
    assert packed.dequantized_weight().dtype == packed.weight_dtype
    x = torch.randn(5, 40)
    with torch.no_grad():
        y = packed(x)  # a float32 input still runs the float32 kernel on the unrounded state
    ref = linear_ref(layer, x)
    assert y.dtype == torch.float32
    assert torch.allclose(y.double(), ref, rtol=1e-6, atol=1e-6 * float(ref.abs().max()))


def test_state_dict_keeps_the_old_keys_and_loads_into_a_fresh_layer_bit_for_bit():
    src = gq.pack_model(quant_layer(Q.NVFP4Weight, seed=0))
    sd = src.state_dict()
    assert list(sd)[:4] == OLD_KEYS
    assert sd["weight_codes"].dtype == torch.uint8 and sd["weight_scale"].dtype == torch.uint8
    assert sd["weight_tensor_scale"].dtype == torch.float32 and sd["weight_tensor_scale"].dim() == 0
    fresh = gq.pack_model(quant_layer(Q.NVFP4Weight, seed=1))
    assert not torch.equal(fresh.weight_codes, src.weight_codes)  # (the load has something to do)
    assert fresh.load_state_dict(sd) is not None
    for key in OLD_KEYS:
        assert torch.equal(bits(fresh.state_dict()[key]), bits(sd[key])), key
    x = torch.randn(3, 40)
    with torch.no_grad():
        assert torch.equal(fresh(x), src(x))
    placed = gq.pack_model(quant_layer(Q.NVFP4Weight, seed=1))
    placed.load_state_dict(sd, assign=True)  # the checkpoint's tensors themselves
    assert placed.weight_codes.data_ptr() == sd["weight_codes"].data_ptr()
    with torch.no_grad():
        assert torch.equal(placed(x), src(x))


def test_state_dict_errors_name_the_entry():
    layer = gq.pack_model(quant_layer(Q.NVFP4Weight))
    sd = layer.state_dict()
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "weight_scale"'):
        layer.load_state_dict({k: v for k, v in sd.items() if k != "weight_scale"})
    with pytest.raises(RuntimeError, match="size mismatch for weight_codes"):
        layer.load_state_dict(dict(sd, weight_codes=sd["weight_codes"][:-1]))
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "weight_extra"'):
        layer.load_state_dict(dict(sd, weight_extra=torch.zeros(1)))
    no_bias = gq.pack_model(QuantLinear(40, 12, bias=False, weight_quant=Q.MXFloat4e2m1Weight))
    assert list(no_bias.state_dict())[:2] == ["weight_codes", "weight_scale"]
    assert "bias" not in no_bias.state_dict() and "weight_tensor_scale" not in no_bias.state_dict()


def test_the_kernel_view_is_made_once_and_again_after_each_change():
    layer = quant_layer(Q.NVFP4Weight)
    packed = gq.pack_model(copy.deepcopy(layer))
    x = torch.randn(2, 40)
    with torch.no_grad():
        first = packed._weight()
        packed(x)
        packed(x)
        assert packed._weight() is first  # nothing made per call
        g = float(packed.weight_tensor_scale)
        packed.weight_tensor_scale.mul_(2.0)  # in place: the kernel takes g in its parameter record
        scaled = packed._weight()
        assert scaled is not first and scaled.params.global_scale == 2.0 * g
        assert packed._weight() is scaled
        packed.load_packed(gq.pack_model(copy.deepcopy(layer)).packed_weight())
        loaded = packed._weight()
        assert loaded is not scaled and loaded.params.global_scale == g
        packed.load_state_dict(packed.state_dict())
        assert packed._weight() is not loaded
        codes = packed.weight_codes.clone()
        before = packed._weight()
        packed.weight_codes = codes  # a tensor put in the record's place
        assert packed._weight() is not before and packed._weight().data is codes
        assert torch.equal(packed(x), gq.pack_model(copy.deepcopy(layer))(x))
        packed.weight_codes.zero_()  # in place: the kernel reads the same tensor (FP4 code 0 is +0)
        assert torch.equal(packed(x), packed.bias.expand(2, 12))


def test_assigning_a_state_tensor_of_another_shape_or_dtype_is_refused_by_name():
    packed = gq.pack_model(quant_layer(Q.MXFloat4e2m1Weight))
    with pytest.raises(ValueError, match=r"QuantLinear: PackedLinear.weight_codes takes torch.uint8 of shape"):
        packed.weight_codes = packed.weight_codes[:-1].clone()
    with pytest.raises(ValueError, match=r"PackedLinear.bias takes torch.float32 .* got torch.bfloat16"):
        packed.bias = packed.bias.bfloat16()
    with pytest.raises(ValueError, match=r"weight_tensor_scale takes nothing \(the layer has none\)"):
        packed.weight_tensor_scale = torch.tensor(1.0)


def test_nbytes_counts_the_state_not_the_tables():
    packed = gq.pack_model(quant_layer(Q.NVFP4Weight))  # 40 inputs: 3 blocks of 16 (the last padded)
    assert packed.nbytes == 12 * 48 // 2 + 12 * 3 + 12 * 4 + 4
    sd = packed.state_dict()
    assert packed.nbytes == sum(sd[k].numel() * sd[k].element_size() for k in OLD_KEYS)


def test_a_layer_made_from_a_weight_on_another_device_keeps_its_whole_record_there():
    """The value and scale tables go where the codes are (a CUDA model packed by pack_model once
    reached the op with CPU tables): here the other device is 'meta', which needs no GPU (and no
    tensor scale, whose value the record reads)."""
    from groupquant.packing import pack
    for wq in (Q.MXFloat4e2m1Weight, Q.MXInt8Weight):
        packed = pack(quant_layer(wq).group_quantized_weight("fc")).to("meta")
        record = PackedLinear.from_packed(packed).state
        devices = {name: t.device.type for name, t in record.tensors().items() if t is not None}
        assert set(devices.values()) == {"meta"}, devices
