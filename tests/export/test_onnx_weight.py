import math

import ml_dtypes
import numpy as np
import pytest
import torch

import groupquant as gq
from groupquant.formats import FloatFormat, IntFormat, SpecialValues

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from groupquant.export.onnx.builder import GraphBuilder  # noqa: E402
from groupquant.export.onnx.weight import onnx_elements, weight_dequant_of  # noqa: E402

TP = onnx.TensorProto
FORMATS = gq.MX_FORMATS + [IntFormat(4), IntFormat(4, signed=False), IntFormat(3), IntFormat(12),
                           IntFormat(16, signed=False), FloatFormat(4, 3, SpecialValues.FNUZ),
                           FloatFormat(5, 2, SpecialValues.FNUZ), FloatFormat(2, 2), FloatFormat(1, 0)]
LAYOUTS = [((5, 70), 1, 32), ((37, 3), 0, 32), ((4, 9, 3, 3), 1, 4), ((3, 33), 1, 1), ((2, 20), 1, None)]


def weight(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.exp2(torch.randint(-30, 30, shape, generator=g).float())
    x.view(-1)[:3] = 0.0
    x.view(-1)[-1] = math.nan  # one NaN group
    return x


def dequant_in_ort(q, opset=21, scale_format="float32"):
    import onnxruntime as ort
    b = GraphBuilder(opset)
    out = weight_dequant_of(b, q, "w", scale_format)
    model = b.model([], [onnx.helper.make_tensor_value_info(out, TP.FLOAT, list(q.shape))])
    (y,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    return torch.from_numpy(y), b


@pytest.mark.parametrize("fmt", FORMATS, ids=str)
def test_dequantize_linear_equals_groupquant_bit_for_bit(fmt, bits_equal):
    for i, (shape, dim, block) in enumerate(LAYOUTS):
        q = gq.quantize(weight(shape, i), fmt, block, dim)
        y, _ = dequant_in_ort(q)
        assert bits_equal(y, q.dequantize())
        y, b = dequant_in_ort(q, opset=24, scale_format="e8m0")
        assert bits_equal(y, q.dequantize())
        assert any(t.data_type == TP.FLOAT8E8M0 for t in b.initializers)
        q = gq.quantize(weight(shape, i), fmt, block, dim, scale_mode="float")
        assert bits_equal(dequant_in_ort(q)[0], q.dequantize())


@pytest.mark.parametrize("fmt,data_type", [("int8", TP.INT8), ("fp8_e4m3", TP.FLOAT8E4M3FN),
                                           ("fp8_e5m2", TP.FLOAT8E5M2), ("fp6_e3m2", TP.FLOAT8E4M3FN),
                                           ("fp6_e2m3", TP.FLOAT8E4M3FN), ("fp4_e2m1", TP.FLOAT8E4M3FN)])
def test_mx_initializers_hold_the_element_values(fmt, data_type):
    q = gq.quantize(torch.randn(6, 40), fmt)
    e = onnx_elements(q)
    assert e.data_type == data_type
    values = q.layout.expand(q.element_values()).numpy()
    if data_type == TP.INT8:
        want = np.round(values * 64).astype(np.int8)
    else:
        want = values.astype(ml_dtypes.float8_e4m3fn if data_type == TP.FLOAT8E4M3FN else ml_dtypes.float8_e5m2)
    assert e.raw == want.tobytes()


def test_int4_initializer_is_packed_low_nibble_first():
    q = gq.quantize(torch.randn(2, 7), IntFormat(4), block_size=None)
    e = onnx_elements(q)
    codes = (q.layout.expand(q.codes).reshape(-1).numpy().astype(np.int64) & 0xF).tolist() + [0]
    assert e.data_type == TP.INT4
    assert list(e.raw) == [codes[i] | codes[i + 1] << 4 for i in range(0, 14, 2)]


def test_underflowing_fixed_point_step_gets_its_own_mul(bits_equal):
    fmt = IntFormat(8, frac_bits=24)  # scale 2**-127 times step 2**-24 is below float32's 2**-149
    x = torch.full((2, 32), math.ldexp(1.3, -146))
    x[1] = torch.randn(32)
    q = gq.quantize(x, fmt)
    y, b = dequant_in_ort(q)
    assert bits_equal(y, q.dequantize()) and y[0].abs().max() > 0
    assert [n.op_type for n in b.nodes] == ["DequantizeLinear", "Mul"]


def test_unsupported_settings_are_named():
    with pytest.raises(ValueError, match="fp8_e3m4"):
        onnx_elements(gq.quantize(torch.randn(2, 32), FloatFormat(3, 4)))
    q = gq.quantize(torch.randn(2, 32), "fp4_e2m1")
    with pytest.raises(ValueError, match="opset >= 24"):
        weight_dequant_of(GraphBuilder(23), q, "w", "e8m0")
    with pytest.raises(ValueError, match="scale_format"):
        weight_dequant_of(GraphBuilder(21), q, "w", "e4m3")
    with pytest.raises(ValueError, match="power-of-two"):
        weight_dequant_of(GraphBuilder(24), gq.quantize(torch.randn(2, 32), "int8", scale_mode="float"), "w", "e8m0")


SCALE_SETTINGS = [("nvfp4", {}), ("nvfp4", {"tensor_scale": False}), ("fp8_e4m3", {"scale_format": "e5m0"}),
                  ("fp6_e2m3", {"scale_format": "e3m0"}), ("fp8_e4m3", {"scale_format": "bf16"}),
                  ("fp4_e2m1", {"scale_format": "ue5m2"}), ("int8", {"scale_format": "ue4m3"})]


@pytest.mark.parametrize("fmt,kw", SCALE_SETTINGS, ids=lambda v: str(v))
def test_scale_formats_and_tensor_scale_bit_for_bit(fmt, kw, bits_equal):
    for i, (shape, dim, block) in enumerate(LAYOUTS[:4]):
        for nan in (False, True):
            x = weight(shape, i) if nan else torch.nan_to_num(weight(shape, i))
            q = gq.quantize(x, fmt, 16 if fmt == "nvfp4" else block, dim, **kw)
            y, b = dequant_in_ort(q)
            assert bits_equal(y, q.dequantize())
            if q.scale_format.is_power_of_two:
                y, b = dequant_in_ort(q, opset=24, scale_format="e8m0")
                assert bits_equal(y, q.dequantize())
                assert any(t.data_type == TP.FLOAT8E8M0 for t in b.initializers)


def test_nvfp4_weight_graph():
    x = weight((8, 64), 0).nan_to_num()
    q = gq.quantize(x, "nvfp4")
    y, b = dequant_in_ort(q)
    assert [n.op_type for n in b.nodes] == ["Cast", "DequantizeLinear", "Mul"]
    types = {t.name.rsplit("_", 1)[0]: t for t in b.initializers}
    assert types["w_codes"].data_type == TP.FLOAT8E4M3FN  # FP4 values re-encoded (onnxruntime has no FP4 kernel)
    scale = types["w_scale_e4m3"]
    assert scale.data_type == TP.FLOAT8E4M3FN and list(scale.dims) == [8, 4]
    assert scale.raw_data == q.scale_codes.squeeze(-1).numpy().tobytes()
    g = onnx.numpy_helper.to_array(types["w_tensor_scale"])
    assert g.shape == () and g.dtype == np.float32 and g == q.tensor_scale.numpy()
    with pytest.raises(ValueError, match="power-of-two"):
        weight_dequant_of(GraphBuilder(24), q, "w", "e8m0")
