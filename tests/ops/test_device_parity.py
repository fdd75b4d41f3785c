"""One answer on every device: the CUDA op against the CPU op, bit for bit, for every element
format, scale format (NVFP4's tensor scale included), rounding, dtype and grouping dim; and the
one division that used to differ (``formats.bits.divide``), checked on every device present.

The CUDA cases run wherever a GPU and a CUDA build of the extension are present (skipped here);
the division's test runs on the CPU too, against a float64 quotient rounded once.
"""
from __future__ import annotations

import itertools

import pytest
import torch

import groupquant as gq
from groupquant.formats.bits import divide
from groupquant.ops import make_spec, native
from groupquant.ops.native_ops import native_fake_quant, native_quantize, native_tensor_scale
from groupquant.ops.shared_scale import tensor_scale_divisor, tensor_scale_of
from device_schemes import DTYPES, ROUNDINGS, SCHEMES

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _issue_input(dtype: torch.dtype, draws: int = 2, n: int = 1024) -> list:
    """The inputs the CUDA path was caught on: rows of normals times a logspace over 12 decades."""
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(n, n, generator=g) * torch.logspace(-6, 6, n)).to(dtype) for _ in range(draws)]


def _adversarial(dtype: torch.dtype, cols: int = 70, rows: int = 64) -> torch.Tensor:
    """Binades from 2^-30 to 2^30 per column, ties of every format, NaN / Inf blocks, padding (70
    columns: no run of any vector width fits, so the one-element kernels; 72: the vector kernels,
    a short last block along the last dim); ``rows`` rows."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(rows, cols, generator=g) * torch.exp2(torch.arange(cols).float() * (60 / (cols - 1)) - 30)
    x[3, :16] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0] * 2)  # E2M1 midpoints
    x[5, 7], x[9, 40], x[12, 3] = float("nan"), float("inf"), -float("inf")
    x[20] = 0.0
    return x.to(dtype)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit patterns (NaN payloads aside), float tensors of one dtype."""
    a, b = a.detach().cpu(), b.detach().cpu()
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all() and
                                       torch.equal(torch.signbit(a) | a.isnan(), torch.signbit(b) | b.isnan()))


@pytest.mark.parametrize("device", DEVICES)
def test_divide_is_the_correctly_rounded_quotient_on_every_device(device: str) -> None:
    # amax values over 40 binades and every divisor the library divides by (2688, the max normals)
    g = torch.Generator().manual_seed(0)
    amax = (torch.rand(1 << 16, generator=g) + 1) * torch.exp2(torch.randint(-20, 20, (1 << 16,), generator=g).float())
    for d in (2688.0, 6.0, 448.0, 7.5, 28.0, 57344.0, 127 / 64):
        want = (amax.double() / d).float()  # float64 then one rounding: the float32 quotient (53 >= 2*24+2)
        got = divide(amax.to(device), d).cpu()
        assert torch.equal(got, want), f"divide by {d} on {device}"
    # the reciprocal product torch's CUDA kernel uses for a Python divisor differs: the test sees it
    assert not torch.equal(amax * (1 / 2688.0), (amax.double() / 2688.0).float())


@pytest.mark.parametrize("device", DEVICES)
def test_nvfp4_tensor_scale_is_amax_over_2688_rounded_once(device: str) -> None:
    for x in _issue_input(torch.float32, draws=1, n=256) + [_adversarial(torch.float32).nan_to_num(0, 0, 0)]:
        q = gq.quantize(x.to(device), "nvfp4")
        want = max((x.abs().max().double() / 2688.0).float().item(), 2.0 ** -126)
        assert q.tensor_scale.item() == want
        d = tensor_scale_divisor(gq.get_format("fp4_e2m1"), gq.get_scale_format("ue4m3"))
        assert d == 2688.0


def _cuda_ready() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU and a CUDA build of torch")
    if not native.native_available(torch.device("cuda")):
        pytest.skip("the extension was built without CUDA")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_tensor_scale_op_equals_the_cpu_op_and_the_definition(dtype: torch.dtype) -> None:
    # the native op (aminmax and a one-thread kernel) against the torch ops of shared_scale's
    # definition on the same card, and against the CPU op
    _cuda_ready()
    info = torch.finfo(dtype)
    base = _adversarial(dtype)
    cases = [base, base.nan_to_num(0.0, 0.0, 0.0), torch.zeros(3, dtype=dtype), torch.full((2,), -0.0, dtype=dtype),
             torch.tensor([-3000.0, 2999.0], dtype=dtype), torch.tensor([info.tiny], dtype=dtype),
             torch.tensor([-info.max, 1.0], dtype=dtype)] + _issue_input(dtype, draws=1, n=256)
    for x in cases:
        spec = make_spec(x, "nvfp4")
        cpu, cuda = native_tensor_scale(x, spec), native_tensor_scale(x.cuda(), spec)
        assert _same(cpu, cuda), f"{dtype}: CPU {cpu.item()!r}, CUDA {cuda.item()!r}"
        assert _same(cuda, tensor_scale_of(x.cuda(), spec.fmt, spec.scale_format)), f"{dtype}: the definition on CUDA"


def _compare(x: torch.Tensor, fmt: str, kw: dict, what: str) -> None:
    """fake_quant, quantize (codes, scales, scale codes, tensor scale) and the clipped mask on CPU and CUDA."""
    spec = make_spec(x, fmt, **kw)
    cpu_v, cuda_v = native_fake_quant(x, spec), native_fake_quant(x.cuda(), spec)
    assert _same(cpu_v, cuda_v), f"fake_quant {what}: {int((cpu_v != cuda_v.cpu()).sum())} elements differ"
    qc, qg = native_quantize(x, spec), native_quantize(x.cuda(), spec)
    assert torch.equal(qc.codes, qg.codes.cpu()), f"codes {what}"
    assert _same(qc.scale, qg.scale), f"scales {what}"
    if qc.scale_codes is not None:
        assert torch.equal(qc.scale_codes, qg.scale_codes.cpu()), f"scale codes {what}"
    if qc.tensor_scale is not None:
        assert _same(qc.tensor_scale, qg.tensor_scale), f"tensor scale {what}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [-1, 0])
def test_cuda_equals_cpu_on_the_inputs_that_differed(dtype: torch.dtype, dim: int) -> None:
    _cuda_ready()
    for i, x in enumerate(_issue_input(dtype)):  # 1024 x 1024: the vector kernels along either dim
        for fmt, kw in SCHEMES:
            _compare(x, fmt, dict(kw, dim=dim), f"{fmt} {kw} {dtype} draw {i} dim={dim}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [-1, 0])
@pytest.mark.parametrize("cols", [70, 72], ids=["one-element", "vector"])
def test_cuda_equals_cpu_for_every_scheme_rounding_and_dim(dtype: torch.dtype, dim: int, cols: int) -> None:
    _cuda_ready()
    x = _adversarial(dtype, cols)
    for (fmt, kw), rounding in itertools.product(SCHEMES, ROUNDINGS):
        _compare(x, fmt, dict(kw, dim=dim, rounding=rounding, seed=5 if rounding == "stochastic" else None),
                 f"{fmt} {kw} {dtype} dim={dim} {rounding} {cols} columns")
    # other block sizes (a block is at most the dim): last dim, warp groups of 8 lanes and whole rows;
    # dim 0, 1 and 8 lanes a block with its rows held; of 320 rows, 32 lanes a block, rows held
    # (256) or read again (300: a short last block)
    for block in (7, 64, 128):
        _compare(x, "fp8_e4m3", dict(dim=dim, block_size=block), f"block {block} {dtype} dim={dim} {cols} columns")
    tall = _adversarial(dtype, cols, rows=320)
    for block in (256, 300):
        _compare(tall, "fp8_e4m3", dict(dim=dim, block_size=block), f"block {block} {dtype} dim={dim} 320 x {cols}")
