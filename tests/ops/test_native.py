"""The native (C++/CUDA) ops against the PyTorch reference: bit for bit, every format and mode.

The reference (ops/reference.py) defines the numerics; here the native op must reproduce it
exactly (NaN positions equal, every other bit equal, -0 included) on MX and generic formats, all
scale modes and rounding modes (stochastic too: both hash each element's index), all input
dtypes, padded / odd sizes, any group dim, non-contiguous inputs and special blocks.
"""
from __future__ import annotations

import dataclasses
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import groupquant as gq
from groupquant.formats import FloatFormat, IntFormat, SpecialValues
from groupquant.ops import make_spec, native, reference_fake_quant, reference_quantize
from groupquant.ops.kernel_params import kernel_params, op_params
from groupquant.ops.native_ops import native_fake_quant, native_quantize

pytestmark = pytest.mark.skipif(not native.load(), reason="native kernels unavailable (no compiler)")

FORMATS = {
    "int8": gq.get_format("int8"),
    "fp8_e4m3": gq.get_format("fp8_e4m3"),
    "fp8_e5m2": gq.get_format("fp8_e5m2"),
    "fp6_e3m2": gq.get_format("fp6_e3m2"),
    "fp6_e2m3": gq.get_format("fp6_e2m3"),
    "fp4_e2m1": gq.get_format("fp4_e2m1"),
    "int3": IntFormat(3),
    "uint5": IntFormat(5, signed=False),
    "int12_frac3": IntFormat(12, frac_bits=3),
    "fnuz_e5m2": FloatFormat(5, 2, SpecialValues.FNUZ),
    "e4m3_none": FloatFormat(4, 3, SpecialValues.NONE),
    "e3m4_ieee": FloatFormat(3, 4, SpecialValues.IEEE),
    "ue3m2": FloatFormat(3, 2, signed=False),
    "e6m9": FloatFormat(6, 9),
}
SCALE_MODES = ("floor", "ceil", "even", "rceil", "float")
ROUNDINGS = ("even", "nearest", "floor", "stochastic")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# (shape, dim, block_size): last dim exact / padded / 7-blocks, middle and first dims, whole dim.
LAYOUTS = [((4, 64), -1, 32), ((3, 70), -1, 32), ((2, 45), 1, 7), ((3, 37, 5), 1, 8), ((9, 6), 0, 4),
           ((50,), 0, None), ((2, 3, 11, 4), -2, 3)]


def special_values(n: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Wide-range random values with exact grid points, ties, -0 and subnormals mixed in."""
    mag = torch.exp2(torch.randint(-12, 12, (n,), generator=gen).float())
    x = torch.randn(n, generator=gen) * mag
    pick = torch.randint(0, 8, (n,), generator=gen)
    ties = (torch.randint(-40, 40, (n,), generator=gen).float() + 0.5) * 0.125  # midpoints of coarse grids
    x = torch.where(pick == 0, ties, x)
    x = torch.where(pick == 1, torch.full_like(x, -0.0), x)
    tiny = torch.finfo(dtype).tiny
    x = torch.where(pick == 2, torch.randn(n, generator=gen) * tiny * 0.25, x)  # subnormal in dtype
    x = torch.where(pick == 3, torch.nextafter(torch.exp2(torch.randint(-3, 4, (n,), generator=gen).float()),
                                               torch.zeros(n)), x)  # just below a power of two
    return x.to(dtype)


def make_input(shape, dim: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random input whose groups include an all-zero, a NaN, an Inf, a -Inf and a subnormal-only group."""
    gen = torch.Generator().manual_seed(seed)
    x = special_values(math.prod(shape), dtype, gen).view(shape)
    lines = x.movedim(dim, -1).reshape(-1, shape[dim])  # a view: writes reach x
    rows = lines.shape[0]
    lines[0 % rows, :3] = 0.0
    lines[1 % rows, -1] = float("nan")
    lines[2 % rows, 0] = float("inf")
    lines[3 % rows, -2:] = -float("inf")
    if rows > 4:
        lines[4] = torch.finfo(dtype).tiny * 0.5
    if rows > 5:
        lines[5] = 0.0
    return x


def bits(t: torch.Tensor) -> torch.Tensor:
    """Bit pattern of a float tensor, with every NaN mapped to one value."""
    t = torch.where(torch.isnan(t), torch.full_like(t, float("nan")), t)
    return t.view(torch.int32 if t.element_size() == 4 else torch.int16)


def assert_same(native_out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    assert native_out.dtype == ref.dtype and native_out.shape == ref.shape, what
    assert torch.equal(torch.isnan(native_out), torch.isnan(ref)), f"NaN positions differ: {what}"
    diff = bits(native_out.contiguous()) != bits(ref.contiguous())
    assert not bool(diff.any()), (f"{int(diff.sum())} values differ ({what}): native "
                                  f"{native_out[diff][:4].tolist()} reference {ref[diff][:4].tolist()}")


def check_against_reference(x: torch.Tensor, fmt, block_size, dim, rounding, scale_mode, saturating: bool = True,
                            seed: int = 1234) -> None:
    spec = make_spec(x, fmt, block_size, dim, rounding, scale_mode, seed=seed, saturating=saturating)
    what = (f"{fmt.name} {scale_mode} {rounding} {x.dtype} {tuple(x.shape)} dim={dim} block={block_size} "
            f"saturating={saturating}")
    ref_out, ref_mask = reference_fake_quant(x, spec, want_mask=True)
    out, mask, _ = torch.ops.groupquant.group_fake_quant(x, op_params(spec, x.dtype), True, False)
    assert_same(out, ref_out, what)
    assert torch.equal(mask, ref_mask), f"clipped-STE mask differs: {what}"
    assert_same(native_fake_quant(x, spec), ref_out, what)
    ref_q, q = reference_quantize(x, spec), native_quantize(x, spec)
    for want_mask in (False, True):  # values, mask and scales from one pass
        out, mask, scale = torch.ops.groupquant.group_fake_quant(x, op_params(spec, x.dtype), want_mask, True)
        assert_same(out, ref_out, f"with scale: {what}")
        assert torch.equal(mask, ref_mask) if want_mask else mask.numel() == 0, f"mask with scale: {what}"
        assert_same(scale, ref_q.scale, f"scale beside the values: {what}")
    assert q.codes.dtype == ref_q.codes.dtype and torch.equal(q.codes, ref_q.codes), f"codes differ: {what}"
    assert_same(q.scale, ref_q.scale, f"scale: {what}")
    if ref_q.scale_codes is None:
        assert q.scale_codes is None
    else:
        assert torch.equal(q.scale_codes, ref_q.scale_codes), f"E8M0 codes differ: {what}"


@pytest.mark.parametrize("scale_mode", SCALE_MODES)
@pytest.mark.parametrize("name", list(FORMATS))
def test_bit_exact_against_reference(name: str, scale_mode: str) -> None:
    fmt = FORMATS[name]
    for i, (shape, dim, block) in enumerate(LAYOUTS):
        for rounding in ROUNDINGS:
            for dtype in DTYPES:
                x = make_input(shape, dim, dtype, seed=hash((name, scale_mode, i, rounding)) % 10_000)
                check_against_reference(x, fmt, block, dim, rounding, scale_mode)


@pytest.mark.parametrize("name", ["fp8_e4m3", "int8", "fp4_e2m1"])
def test_non_contiguous_inputs(name: str) -> None:
    fmt = FORMATS[name]
    base = make_input((40, 70), 1, torch.float32, seed=7)
    for x, dim in [(base.t(), -1), (base.t(), 0), (base[:, ::3], -1), (base[::2, 5:], 0),
                   (base.view(40, 7, 10).permute(2, 0, 1), 1)]:
        assert not x.is_contiguous()
        for rounding in ("even", "stochastic"):
            for dtype in (torch.float32, torch.bfloat16):
                check_against_reference(x.to(dtype), fmt, 32, dim, rounding, "floor")


def test_large_blocks_and_wide_inner_dims_take_the_chunked_paths() -> None:
    # a whole-dim block longer than the CPU tile (2048) and an inner dim wider than it
    for shape, dim, block in [((3, 5000), -1, None), ((2, 4099), -1, 3000), ((37, 2100), 0, 32)]:
        x = make_input(shape, dim, torch.float32, seed=3)
        for rounding in ("even", "stochastic"):
            check_against_reference(x, FORMATS["fp8_e4m3"], block, dim, rounding, "floor")
            check_against_reference(x, FORMATS["int8"], block, dim, rounding, "float")


def test_quantize_along_the_last_dim_goes_in_runs_of_blocks() -> None:
    # runs of whole blocks up to the CPU tile (2048 elements) and across rows; a short block (the
    # last of a row) ends a run and its padding codes follow it; many runs per parallel task
    for shape, block in [((64, 128), 16), ((70, 100), 32), ((9, 1000), 300), ((3, 2100), 2048)]:
        x = make_input(shape, -1, torch.bfloat16, seed=5)
        for rounding in ("even", "stochastic"):
            check_against_reference(x, FORMATS["fp4_e2m1"], block, -1, rounding, "ceil")
            check_against_reference(x, FORMATS["int8"], block, -1, rounding, "float")
            check_against_reference(x.float(), FORMATS["e6m9"], block, -1, rounding, "even")


def test_public_api_runs_native_and_matches_reference_with_gradients() -> None:
    assert gq.ops.backend() == "native"
    x = make_input((6, 96), -1, torch.float32, seed=11).nan_to_num(0.0, 0.0, 0.0) * 100
    x[:, 0] = 7.9  # FP6 e2m3 (max 7.5) at scale 1 saturates it under the OCP floor rule
    for ste in ("identity", "clipped"):
        spec = make_spec(x, "fp6_e2m3", 32, -1, "even", "floor")
        ref_out, ref_mask = reference_fake_quant(x, spec, want_mask=True)
        xr = x.clone().requires_grad_(True)
        out = gq.fake_quant(xr, "fp6_e2m3", 32, -1, "even", "floor", ste=ste)
        assert_same(out.detach(), ref_out, ste)
        grad = torch.randn_like(x)
        out.backward(grad)
        expected = grad * ref_mask if ste == "clipped" else grad
        assert torch.equal(xr.grad, expected)
    assert ref_mask.sum() < ref_mask.numel()  # some elements saturated, so the clipped case is real


def test_stochastic_rounding_is_seeded_and_unbiased() -> None:
    x = torch.randn(16, 64)
    a = gq.fake_quant(x, "fp4_e2m1", rounding="stochastic", seed=5)
    assert torch.equal(a, gq.fake_quant(x, "fp4_e2m1", rounding="stochastic", seed=5))
    assert not torch.equal(a, gq.fake_quant(x, "fp4_e2m1", rounding="stochastic", seed=6))
    # blocks [4.0, v, v, ...]: scale 2^0 for FP4 (emax 2), v = 1.3 lies between grid points 1 and 1.5
    n_blocks, v = 4096, 1.3
    x = torch.full((n_blocks, 32), v)
    x[:, 0] = 4.0
    y = gq.fake_quant(x, "fp4_e2m1", rounding="stochastic", seed=99)[:, 1:]
    assert set(torch.unique(y).tolist()) == {1.0, 1.5}
    p = (v - 1.0) / 0.5  # probability of rounding up
    sigma = 0.5 * math.sqrt(p * (1 - p) / y.numel())
    assert abs(float(y.double().mean()) - v) < 5 * sigma


def test_op_rejects_bad_arguments_by_name() -> None:
    x = torch.randn(4, 32)
    record = kernel_params(make_spec(x, "fp8_e4m3"), x.dtype)

    def with_field(**change) -> list:
        return dataclasses.replace(record, **change).pack()

    def op(x, params):
        return torch.ops.groupquant.group_fake_quant(x, params, False, False)

    with pytest.raises(ValueError, match="rounding"):
        op(x, with_field(rounding=4))
    with pytest.raises(ValueError, match="scale_mode"):
        op(x, with_field(scale_mode=-1))
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        op(x.double(), record.pack())
    with pytest.raises(ValueError, match="block_size"):
        op(x, with_field(block_size=0))
    with pytest.raises(ValueError, match="dim"):
        op(x, with_field(dim=5))
    with pytest.raises(ValueError, match="emax"):  # does not fit the field's int32
        op(x, with_field(emax=2 ** 40))
    with pytest.raises(ValueError, match="saturating"):
        op(x, dataclasses.replace(kernel_params(make_spec(x, "fp4_e2m1"), x.dtype), saturating=False).pack())
    # the element rounding clamps exponents to emax + 1 (group_quant.h quantize_element): a float
    # format whose max_normal reaches 2^(emax + 1) would round its top binade wrongly
    with pytest.raises(ValueError, match=r"max_normal must lie below 2\^\(emax \+ 1\).*max_normal=512.*emax=8"):
        op(x, with_field(max_normal=512.0))
    op(x, with_field(max_normal=511.0))  # below 2^9: accepted
    with pytest.raises(ValueError, match="params must hold"):
        op(x, record.pack()[:-1])


def test_op_rejects_scale_fields_that_do_not_fit_their_kind() -> None:
    # group_quant.h checks the scale part of the record per scale kind (scale_fields_error)
    x = torch.randn(4, 32)

    def op(scale_format: str, rule: str, **change) -> None:
        record = kernel_params(make_spec(x, "fp4_e2m1", scale_mode=rule, scale_format=scale_format), x.dtype)
        torch.ops.groupquant.group_fake_quant(x, dataclasses.replace(record, **change).pack(), False, False)

    op("bfloat16", "float")  # a record as made is accepted
    with pytest.raises(ValueError, match=r"scale_kind must be 0\.\.3 .*got 4"):
        op("e8m0", "floor", scale_kind=4)
    with pytest.raises(ValueError, match="scale_kind must be"):
        op("e8m0", "floor", scale_kind=-1)
    with pytest.raises(ValueError, match="scale_bias in \\[1, 127\\].*scale_bias 128"):
        op("e8m0", "floor", scale_bias=128)
    with pytest.raises(ValueError, match="exp_max <= scale_bias"):
        op("e5m0", "floor", exp_max=16)
    with pytest.raises(ValueError, match="scale_nan_code must be a byte"):
        op("e8m0", "floor", scale_nan_code=256)
    with pytest.raises(ValueError, match="minifloat scale needs 0..7 mantissa bits.*scale_mantissa_bits 8"):
        op("ue4m3", "float", scale_mantissa_bits=8)
    with pytest.raises(ValueError, match="normal range"):
        op("ue4m3", "float", scale_min=2.0 ** -127)
    with pytest.raises(ValueError, match="tensor_scale needs a minifloat"):
        op("float32", "float", tensor_scale=True)
    with pytest.raises(ValueError, match="scale_mode float goes with float-valued"):
        op("float32", "float", scale_mode=0)  # the floor rule on a float32 scale
    with pytest.raises(ValueError, match="scale_mode float goes with float-valued"):
        op("e8m0", "floor", scale_mode=4)  # the float rule on an E8M0 scale


def test_op_treats_a_block_size_beyond_the_dim_as_the_whole_dim() -> None:
    # the op itself, given a huge block (it used to overflow the block count and return garbage)
    x = make_input((3, 40), -1, torch.float32, seed=2).nan_to_num(0.0, 0.0, 0.0)
    whole = kernel_params(make_spec(x, "fp8_e4m3", None), x.dtype)
    for block in (41, 2 ** 40, sys.maxsize):
        params = dataclasses.replace(whole, block_size=block).pack()
        assert_same(torch.ops.groupquant.group_fake_quant(x, params, False, False)[0], native_fake_quant(x, make_spec(x, "fp8_e4m3", None)),
                    f"block {block}")
        codes, scale, _ = torch.ops.groupquant.group_quantize(x, params, torch.uint8)
        assert codes.shape == (3, 1, 40) and scale.shape == (3, 1, 1)
        fake_codes = torch.library.opcheck(torch.ops.groupquant.group_quantize.default, (x, params, torch.uint8))
        assert all(v == "SUCCESS" for v in fake_codes.values())


def test_extension_reports_the_record_fields_in_order() -> None:
    from groupquant.ops.kernel_params import KernelParams, check_field_names, field_names

    names = torch.ops.groupquant.kernel_param_fields().split(",")
    assert tuple(names) == tuple(f.name for f in dataclasses.fields(KernelParams)) == field_names()
    check_field_names(names)
    with pytest.raises(RuntimeError, match="parameter record"):
        check_field_names(names[1:] + names[:1])  # same names, another order
    with pytest.raises(RuntimeError, match="parameter record"):
        check_field_names(names + ["new_field"])


def test_opcheck_passes_on_every_op() -> None:
    x = torch.randn(3, 40, requires_grad=True)
    for rounding in ("even", "stochastic"):
        params = op_params(make_spec(x, "fp8_e4m3", 16, -1, rounding, seed=3), x.dtype)
        torch.library.opcheck(torch.ops.groupquant.group_quantize.default, (x.detach(), params, torch.uint8))
        for want_mask in (False, True):
            for want_scale in (False, True):
                torch.library.opcheck(torch.ops.groupquant.group_fake_quant.default, (x, params, want_mask, want_scale))
    for dtype in (torch.float32, torch.bfloat16):
        xt = x.detach().to(dtype)
        torch.library.opcheck(torch.ops.groupquant.tensor_scale.default, (xt, op_params(make_spec(xt, "nvfp4"), dtype)))


class _QuantMLP(torch.nn.Module):
    """Two linear layers whose weights and inputs are fake-quantized (MXFP8 / MXFP4)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 48)
        self.fc2 = torch.nn.Linear(48, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w1 = gq.fake_quant(self.fc1.weight, "fp8_e4m3")
        h = torch.nn.functional.linear(gq.fake_quant(x, "fp8_e4m3"), w1, self.fc1.bias).relu()
        w2 = gq.fake_quant(self.fc2.weight, "fp4_e2m1", ste="clipped")
        return torch.nn.functional.linear(gq.fake_quant(h, "fp8_e5m2", dim=-1), w2, self.fc2.bias)


def test_torch_compile_fullgraph_matches_eager_forward_and_backward() -> None:
    # aot_eager traces exactly what inductor would (dynamo without graph breaks, the fake kernels,
    # AOTAutograd through the registered backward) but runs eager kernels: equal bit for bit, and
    # no minute of C++ code generation in the test run. Inductor itself: the test below.
    torch.manual_seed(0)
    model = _QuantMLP()
    x = torch.randn(8, 64)
    eager = model(x)
    eager.sum().backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    out = compiled(x)
    out.sum().backward()
    assert torch.equal(out, eager)
    for p, g in zip(model.parameters(), eager_grads):
        assert torch.equal(p.grad, g)


def test_fullgraph_traces_fake_quant_for_every_mx_format() -> None:
    x = torch.randn(4, 64)
    for name in gq.MX_FORMATS:
        torch._dynamo.reset()
        f = torch.compile(lambda t: gq.fake_quant(t, name, rounding="nearest"), fullgraph=True, backend="eager")
        assert torch.equal(f(x), gq.fake_quant(x, name, rounding="nearest")), name


def test_fake_quant_with_scale_equals_fake_quant_and_quantize_with_gradients() -> None:
    x = make_input((5, 3, 70), 1, torch.float32, seed=13).nan_to_num(0.0, 0.0, 0.0) * 50
    for fmt, dim, ste in [("fp8_e4m3", -1, "identity"), ("fp6_e2m3", 1, "clipped"), ("int8", 0, "clipped")]:
        leaf = x.clone().requires_grad_()
        result = gq.ops.fake_quant_with_scale(leaf, fmt, 32, dim, ste=ste)
        assert isinstance(result, gq.ops.FakeQuantResult) and not result.scale.requires_grad
        assert_same(result.value, gq.fake_quant(x, fmt, 32, dim), f"{fmt} value")
        assert_same(result.scale, gq.quantize(x, fmt, 32, dim).scale, f"{fmt} scale")
        grad = torch.randn(x.shape)
        result.value.backward(grad)
        plain_leaf = x.clone().requires_grad_()
        gq.fake_quant(plain_leaf, fmt, 32, dim, ste=ste).backward(grad)
        assert torch.equal(leaf.grad, plain_leaf.grad), f"{fmt} {ste} gradient"


def test_fullgraph_compiles_fake_quant_with_scale_and_quant_linear() -> None:
    from groupquant.nn import QuantLinear
    from groupquant.quantizers import MXFloat8e4m3Act, MXFloat8e4m3Weight

    x = torch.randn(6, 64)
    torch._dynamo.reset()
    f = torch.compile(lambda t: gq.ops.fake_quant_with_scale(t, "fp8_e4m3").scale, fullgraph=True, backend="eager")
    assert torch.equal(f(x), gq.quantize(x, "fp8_e4m3").scale)
    torch.manual_seed(0)
    layer = QuantLinear(64, 24, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act)
    eager = layer(x)
    eager.sum().backward()
    grads = [p.grad.clone() for p in layer.parameters()]
    layer.zero_grad()
    torch._dynamo.reset()
    out = torch.compile(layer, fullgraph=True, backend="aot_eager")(x)
    out.sum().backward()
    assert torch.equal(out, eager)
    for p, g in zip(layer.parameters(), grads):
        assert torch.equal(p.grad, g)


def test_torch_compile_inductor_gives_bit_identical_fake_quant() -> None:
    # the op alone: inductor calls it as an extern kernel (a fused neighbour would cost a C++ build)
    x = make_input((8, 96), -1, torch.float32, seed=5)
    torch._dynamo.reset()
    f = torch.compile(lambda t: gq.fake_quant(t, "fp6_e3m2", scale_mode="even"), fullgraph=True)
    spec = make_spec(x, "fp6_e3m2", scale_mode="even")
    assert_same(f(x), reference_fake_quant(x, spec)[0], "compiled")


@pytest.mark.parametrize("source", [s for s in native._CUDA_SOURCES if s.endswith(".cu")])
def test_cuda_source_compiles_with_nvcc(tmp_path: Path, source: str) -> None:
    """The kernels compile as the extension builds them on an H100 / H200 (sm_90, the build's nvcc
    flags): the card's own branches (``__CUDA_ARCH__ >= 800``) and the inline PTX, which ptxas checks."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on the PATH")
    cmd = [nvcc, "-c", "-std=c++17", *native.CUDA_FLAGS, "-arch=sm_90", "-I", str(native.CSRC),
           str(native.CSRC / source), "-o", str(tmp_path / "k.o")]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU and a CUDA build of torch")
def test_cuda_op_matches_cpu_op() -> None:
    if not native.native_available(torch.device("cuda")):
        pytest.skip("the extension was built without CUDA")
    for name in ("int8", "fp8_e4m3", "fp8_e5m2", "fp4_e2m1", "e6m9", "uint5"):
        for (shape, dim, block) in LAYOUTS:
            for rounding in ROUNDINGS:
                for scale_mode in ("floor", "float"):
                    x = make_input(shape, dim, torch.bfloat16, seed=1)
                    spec = make_spec(x, FORMATS[name], block, dim, rounding, scale_mode, seed=77)
                    assert_same(native_fake_quant(x.cuda(), spec).cpu(), native_fake_quant(x, spec), name)
                    qc, q = native_quantize(x.cuda(), spec), native_quantize(x, spec)
                    assert torch.equal(qc.codes.cpu(), q.codes), name
                    assert torch.equal(qc.scale.cpu().isnan(), q.scale.isnan()), name
                    if q.scale_codes is not None:  # None for scale_mode='float'
                        assert torch.equal(qc.scale_codes.cpu(), q.scale_codes), name


def test_backend_env_forces_the_reference() -> None:
    code = "import groupquant as gq, torch; print(gq.ops.backend(), gq.fake_quant(torch.ones(2, 4), 'int8').sum().item())"
    env = dict(os.environ, GROUPQUANT_BACKEND="reference", PYTHONPATH=os.pathsep.join(sys.path))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["reference", "8.0"]
    assert "building" not in result.stderr


def test_failed_build_warns_once_and_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_build() -> None:
        raise OSError("no compiler found")

    saved = dict(native._state)
    monkeypatch.setattr(native, "_build", broken_build)
    native._state.update(tried=False, ok=False, error=None)
    try:
        with pytest.warns(RuntimeWarning, match="no compiler found"):
            assert native.backend() == "reference"
        assert native.backend() == "reference"  # no second warning (pytest.warns would not catch it)
        monkeypatch.setenv(native.BACKEND_ENV, "native")
        with pytest.raises(RuntimeError, match="failed to build"):
            native.load()
        monkeypatch.setenv(native.BACKEND_ENV, "bogus")
        with pytest.raises(ValueError, match="GROUPQUANT_BACKEND"):
            native.load()
    finally:
        native._state.clear()
        native._state.update(saved)


@pytest.mark.parametrize("served", [False, True])
def test_one_backend_choice_serves_the_group_ops_and_the_packed_gemm(monkeypatch, served) -> None:
    """native.serves is the one backend decision: the group ops and the packed GEMM both follow it."""
    from groupquant.ops import api, packed_gemm
    from groupquant.ops.packed_tables import element_value_table, scale_table
    from groupquant.ops.packed_gemm_params import packed_gemm_params

    if served and not native.load():
        pytest.skip("native kernels unavailable")
    calls = []
    real_decode, real_fake_quant = packed_gemm.reference_packed_decode, api.reference_fake_quant
    monkeypatch.setattr(packed_gemm, "reference_packed_decode", lambda w: calls.append("packed") or real_decode(w))
    monkeypatch.setattr(api, "reference_fake_quant", lambda *a, **k: calls.append("fake_quant") or real_fake_quant(*a, **k))
    monkeypatch.setitem(native._SERVED, "cpu", served)
    w = torch.randn(4, 64)
    p = gq.pack(gq.quantize(w, "fp8_e4m3"))
    weight = packed_gemm.PackedWeight(p.data.reshape(-1).view(torch.uint8), p.scale.view(torch.uint8).reshape(4, -1),
                                      element_value_table(p.fmt), scale_table(p.scale_format),
                                      packed_gemm_params(p.fmt, 4, 64, p.block_size))
    x = torch.randn(3, 64)
    y = packed_gemm.packed_linear(x, weight)
    q = gq.fake_quant(x, "fp8_e4m3")
    assert calls == ([] if served else ["packed", "fake_quant"])
    assert torch.allclose(y, x @ p.dequantize().float().T, rtol=1e-5, atol=1e-5)  # same result either way
    assert torch.equal(q, real_fake_quant(x, make_spec(x, "fp8_e4m3"))[0])
