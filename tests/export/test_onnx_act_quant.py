import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import groupquant as gq
from groupquant.formats import FloatFormat, IntFormat, SpecialValues, get_format

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from groupquant.core import QuantSpec  # noqa: E402
from groupquant.export.onnx.act_quant import dynamic_fake_quant_of  # noqa: E402


def DynamicGroupQuant(fmt, block_size=32, dim=-1, scale_mode="floor"):  # noqa: N802
    """The quantizer spec of a dynamic group quantizer with these settings."""
    restrict = "fp" if scale_mode == "float" else "power_of_two"
    return QuantSpec("test", fmt, "group", block_size, dim, restrict=restrict,
                     scale_rounding="floor" if scale_mode == "float" else scale_mode)
from groupquant.export.onnx.builder import GraphBuilder  # noqa: E402

MODES = ["floor", "ceil", "even", "rceil", "float"]
GENERIC = [IntFormat(4), IntFormat(6, signed=False), FloatFormat(3, 4), FloatFormat(4, 3, SpecialValues.FNUZ),
           FloatFormat(5, 2, SpecialValues.FNUZ), IntFormat(16),
           FloatFormat(2, 2, signed=False), FloatFormat(1, 0)]


@pytest.fixture
def onnx_fake_quant(ort_run):
    def run(x, fmt, block_size=32, dim=-1, scale_mode="floor", opset=21):
        b = GraphBuilder(opset)
        spec = DynamicGroupQuant(get_format(fmt), block_size, dim, scale_mode)
        return ort_run(b, x, dynamic_fake_quant_of(b, "x", x.dim(), x.shape[dim], spec))
    return run


def boundary_blocks(block=32):
    """One block per amax that tests floor(log2): 2**k and its float32 neighbours, from subnormal
    to FLT_MAX, plus elements on rounding ties of every grid step size."""
    rows = []
    g = torch.Generator().manual_seed(1)
    for k in list(range(-149, -120, 3)) + list(range(-20, 21)) + list(range(120, 128)):
        p = torch.tensor(math.ldexp(1.0, k), dtype=torch.float32)
        for amax in (p, torch.nextafter(p, torch.tensor(0.0)), torch.nextafter(p, torch.tensor(math.inf))):
            if not torch.isfinite(amax):
                continue
            frac = torch.randint(0, 64, (block,), generator=g).float() / 64.0 + 1.0 / 128.0  # many ties
            row = amax * frac * torch.where(torch.rand(block, generator=g) < 0.5, -1.0, 1.0)
            row[0] = amax
            rows.append(row)
    rows.append(torch.zeros(block))
    rows.append(torch.full((block,), -0.0))
    rows.append(torch.full((block,), torch.finfo(torch.float32).max))
    nonfinite = torch.randn(3, block, generator=g)
    nonfinite[0, 3], nonfinite[1, 5], nonfinite[2, 7] = math.nan, math.inf, -math.inf
    return torch.cat([torch.stack(rows), nonfinite])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fmt", gq.MX_FORMATS)
def test_mx_formats_bit_exact_on_boundaries(fmt, mode, onnx_fake_quant, bits_equal):
    x = boundary_blocks()
    assert bits_equal(onnx_fake_quant(x, fmt, scale_mode=mode), gq.fake_quant(x, fmt, scale_mode=mode))


@pytest.mark.parametrize("fmt", GENERIC, ids=str)
def test_generic_formats_bit_exact(fmt, onnx_fake_quant, bits_equal):
    x = boundary_blocks(block=16)
    assert bits_equal(onnx_fake_quant(x, fmt, block_size=16), gq.fake_quant(x, fmt, 16))


@pytest.mark.parametrize("shape,dim,block", [((3, 70), -1, 32), ((4, 37, 5), 1, 8), ((2, 9, 3, 3), 1, 4),
                                             ((50, 6), 0, 32), ((5, 45), 1, None)])
def test_any_dim_padding_and_whole_dim_blocks(shape, dim, block, onnx_fake_quant, bits_equal):
    x = torch.randn(shape) * 3
    for fmt in ("fp4_e2m1", "fp8_e4m3", "int8"):
        assert bits_equal(onnx_fake_quant(x, fmt, block, dim), gq.fake_quant(x, fmt, block, dim))


def test_dynamic_batch_size(ort_run, bits_equal):
    b = GraphBuilder(21)
    out = dynamic_fake_quant_of(b, "x", 2, 40, DynamicGroupQuant(get_format("fp6_e2m3")))
    for batch in (1, 7):
        x = torch.randn(batch, 40)
        assert bits_equal(ort_run(b, x, out), gq.fake_quant(x, "fp6_e2m3"))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(gq.MX_FORMATS), mode=st.sampled_from(MODES), seed=st.integers(0, 2 ** 16),
       spread=st.integers(0, 40))
def test_random_magnitudes_bit_exact(fmt, mode, seed, spread, onnx_fake_quant, bits_equal):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 64, generator=g) * torch.exp2(torch.randint(-spread, spread + 1, (4, 64), generator=g).float())
    assert bits_equal(onnx_fake_quant(x, fmt, scale_mode=mode), gq.fake_quant(x, fmt, scale_mode=mode))


@pytest.mark.parametrize("opset", [21, 25, 26])
def test_opsets(opset, onnx_fake_quant, bits_equal):
    x = boundary_blocks()
    assert bits_equal(onnx_fake_quant(x, "fp8_e5m2", opset=opset), gq.fake_quant(x, "fp8_e5m2"))


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="scale_rounding"):
        DynamicGroupQuant(get_format("int8"), scale_mode="round")
    with pytest.raises(ValueError, match="dim=2"):
        dynamic_fake_quant_of(GraphBuilder(21), "x", 2, 8, DynamicGroupQuant(get_format("int8"), dim=2))
    with pytest.raises(ValueError, match="opset"):
        GraphBuilder(20)


SCALE_FORMAT_SETTINGS = [  # (element, block, scale_format, tensor_scale)
    ("fp4_e2m1", 16, "ue4m3", True), ("fp4_e2m1", 16, "ue4m3", False), ("fp8_e4m3", 32, "e5m0", False),
    ("fp6_e2m3", 32, "e3m0", False), ("fp8_e4m3", 32, "bf16", False), ("fp4_e2m1", 32, "ue5m2", False),
    ("int8", 32, "ue4m3", True), ("fp8_e4m3", 32, "float32", False),
]


def scale_format_spec(fmt, block, scale_format, tensor_scale, dim=-1):
    from groupquant.formats import get_scale_format
    sf = get_scale_format(scale_format)
    return QuantSpec("test", get_format(fmt), "group", block, dim, restrict="power_of_two" if sf.is_power_of_two else "fp",
                     scale_rounding="floor", scale_format=sf, tensor_scale=tensor_scale)


def scale_format_inputs(block):
    g = torch.Generator().manual_seed(3)
    wide = torch.randn(6, 4 * block, generator=g) * torch.exp2(torch.randint(-30, 30, (6, 4 * block), generator=g).float())
    tiny = torch.randn(2, 4 * block, generator=g) * 1e-38  # below 2688 * 2**-126: the tensor scale's floor
    huge = torch.full((1, 4 * block), 3e38)
    return [boundary_blocks(block), wide, torch.randn(3, 70), tiny, huge, torch.zeros(2, 4 * block),
            boundary_blocks(block)[:-3]]  # the last without NaN / Inf (with them, a tensor scale makes all NaN)


@pytest.mark.parametrize("fmt,block,scale_format,tensor_scale", SCALE_FORMAT_SETTINGS, ids=str)
def test_scale_formats_and_tensor_scale_bit_exact(fmt, block, scale_format, tensor_scale, ort_run, bits_equal):
    for x in scale_format_inputs(block):
        b = GraphBuilder(21)
        out = dynamic_fake_quant_of(b, "x", 2, x.shape[1], scale_format_spec(fmt, block, scale_format, tensor_scale))
        want = gq.fake_quant(x, fmt, block, scale_format=scale_format, tensor_scale=tensor_scale)
        assert bits_equal(ort_run(b, x, out), want)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2 ** 16), spread=st.integers(0, 40), tensor_scale=st.booleans(), dim=st.sampled_from([0, 1]))
def test_nvfp4_random_magnitudes_bit_exact(seed, spread, tensor_scale, dim, ort_run, bits_equal):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(24, 40, generator=g) * torch.exp2(torch.randint(-spread, spread + 1, (24, 40), generator=g).float())
    b = GraphBuilder(21)
    out = dynamic_fake_quant_of(b, "x", 2, x.shape[dim], scale_format_spec("fp4_e2m1", 16, "ue4m3", tensor_scale, dim))
    assert bits_equal(ort_run(b, x, out), gq.fake_quant(x, "nvfp4", dim=dim, tensor_scale=tensor_scale))
