"""The CUDA kernels' own source, run on the CPU, equals the CPU kernel bit for bit.

CI has no GPU, so the CUDA sources (csrc/group_quant_cuda.cu, csrc/packed_gemm_cuda.cu) are
compiled with the host compiler against a stand-in for CUDA (cuda_emulation/, loaded by
emulated_cuda.py): every thread of a block runs at once, warp shuffles and ``__syncthreads`` are
real barriers. What this checks is the kernels' indexing: the warp groups of the last-dim kernel
(1 to 32 lanes a block, several runs a lane), 16-byte vector runs and the scalar fallback
(misaligned pointers, rows that are not a multiple of the vector), the column kernel of other
grouping dims, short last blocks and their padding codes, every output (values, mask, scales,
scale codes, codes of every width), NVFP4's tensor scale read on the device, stochastic rounding's
element index, and the packed GEMM's decode and warp reduction. The per-element math is the
shared header both devices compile (csrc/group_quant.h); what only a GPU can check (nvcc's code,
``__CUDA_ARCH__`` branches) is tests/ops/test_device_parity.py's, on a GPU.

The reference is the CPU op (itself tested against the PyTorch reference and ml_dtypes elsewhere);
the packed decode is also checked against the PyTorch decode, the packed GEMM against float64.
"""
from __future__ import annotations

import itertools
from typing import Tuple

import pytest
import torch

import emulated_cuda
from device_schemes import DTYPES, ROUNDINGS, SCHEMES
from groupquant.formats import E8M0, FloatFormat, IntFormat
from groupquant.ops import make_spec, native
from groupquant.ops.codes import code_dtype
from groupquant.ops.kernel_params import field_index, op_params
from groupquant.ops.reference import tensor_scale_for
from groupquant.ops.shared_scale import tensor_scale_divisor


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    if not native.load():
        pytest.skip("the native extension is not built (the CPU op is the reference)")
    emulated_cuda.library()


def _adversarial(rows: int, cols: int, dtype: torch.dtype, seed: int = 11) -> torch.Tensor:
    """Binades from 2^-30 to 2^30 across the columns, E2M1 midpoints (ties), NaN / Inf, a zero row."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * torch.exp2(torch.linspace(-30, 30, cols))
    x[1, :16] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0] * 2)
    x[2, min(5, cols - 1)], x[min(9, rows - 1), cols // 2], x[0, cols - 1] = float("nan"), float("inf"), -float("inf")
    x[min(4, rows - 1)] = 0.0
    return x.to(dtype)


def _offset(x: torch.Tensor, elements: int) -> torch.Tensor:
    """A contiguous copy of x whose data starts ``elements`` elements into its storage."""
    buf = torch.empty(x.numel() + elements, dtype=x.dtype)
    out = buf[elements:].view(x.shape)
    out.copy_(x)
    return out


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values and signs, NaN where NaN (float tensors of one dtype)."""
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all()) and torch.equal(
        torch.signbit(a) | a.isnan(), torch.signbit(b) | b.isnan())


def _same_nan_codes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """16-bit tensors: the NaNs' bits equal but for the sign (the kernels' NaN codes, 0x7FC0 for
    bfloat16 and 0x7E00 for float16; a NaN's sign differs between the CPU's and the card's
    arithmetic). True for other dtypes."""
    if a.element_size() != 2:
        return True
    nan = a.isnan()
    return torch.equal((a.view(torch.int16)[nan] & 0x7FFF), (b.view(torch.int16)[nan] & 0x7FFF))


def _empty_like(t: torch.Tensor, name: str, unaligned: Tuple[str, ...]) -> torch.Tensor:
    """An output buffer like t (filled with 77, so an element the kernel skips shows), one element
    into its storage when ``name`` is in ``unaligned``."""
    return _offset(torch.full_like(t, 77), 1) if name in unaligned else torch.full_like(t, 77)


def _check(x: torch.Tensor, fmt, what: str, unaligned: Tuple[str, ...] = (), **kw) -> None:
    """Every output of fake_quant and quantize from the emulated CUDA kernel against the CPU op;
    the outputs named in ``unaligned`` (out, mask, scale, codes, scale_codes) start one element
    into their storage."""
    spec = make_spec(x, fmt, **kw)
    params = op_params(spec, x.dtype)
    ts = tensor_scale_for(x, spec)
    dim, block = kw.get("dim", -1), params[field_index("block_size")]
    out, mask, scale = torch.ops.groupquant.group_fake_quant(x, params, True, True, ts)
    e_out, e_mask, e_scale = (_empty_like(t, n, unaligned) for t, n in ((out, "out"), (mask, "mask"), (scale, "scale")))
    emulated_cuda.group_op(x, params, dim=dim, block_size=block, tensor_scale=ts, out=e_out, mask=e_mask, scale=e_scale)
    bad = int((~((out == e_out) | (out.isnan() & e_out.isnan()))).sum())
    assert _same(out, e_out), f"fake_quant {what}: {bad} of {out.numel()} elements differ"
    assert _same_nan_codes(out, e_out), f"fake_quant {what}: NaN codes differ"
    assert torch.equal(mask, e_mask), f"mask {what}"
    assert _same(scale, e_scale), f"fake_quant's scales {what}"
    codes, qscale, scale_codes = torch.ops.groupquant.group_quantize(x, params, code_dtype(spec.fmt), ts)
    e_codes, e_qscale, e_scale_codes = (_empty_like(t, n, unaligned) for t, n in
                                        ((codes, "codes"), (qscale, "scale"), (scale_codes, "scale_codes")))
    emulated_cuda.group_op(x, params, dim=dim, block_size=block, tensor_scale=ts, codes=e_codes, scale=e_qscale,
                           scale_codes=e_scale_codes)
    assert torch.equal(codes, e_codes), f"codes {what} (padding included)"
    assert _same(qscale, e_qscale), f"scales {what}"
    assert torch.equal(scale_codes, e_scale_codes), f"scale codes {what}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [-1, 0])
def test_every_scheme_dtype_and_dim(dtype: torch.dtype, dim: int) -> None:
    # 40 x 72: rows and columns a multiple of every vector width (16-byte runs), last blocks short
    x = _adversarial(40, 72, dtype)
    for fmt, kw in SCHEMES:
        _check(x, fmt, f"{fmt} {kw} {dtype} dim={dim}", dim=dim, **kw)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_rounding_on_both_kernels(dtype: torch.dtype) -> None:
    x = _adversarial(40, 72, dtype, seed=5)
    for (fmt, kw), rounding, dim in itertools.product([("fp4_e2m1", {}), ("nvfp4", {}), ("int8", {})], ROUNDINGS,
                                                       (-1, 0)):
        seed = 9 if rounding == "stochastic" else None
        _check(x, fmt, f"{fmt} {rounding} {dtype} dim={dim}", dim=dim, rounding=rounding, seed=seed, **kw)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scalar_fallback_for_unaligned_pointers_and_rows(dtype: torch.dtype) -> None:
    x = _adversarial(40, 72, dtype, seed=3)
    for dim in (-1, 0):
        # the input, or one output, one element into its storage: no 16-byte runs (on a GPU a vector
        # access there is a "misaligned address" fault; here the alignment sanitizer ends the process)
        _check(_offset(x, 1), "fp8_e4m3", f"unaligned input {dtype} dim={dim}", dim=dim)
        for name in ("out", "mask", "codes"):
            _check(x, "nvfp4", f"unaligned {name} {dtype} dim={dim}", unaligned=(name,), dim=dim)
    # 70 columns: not a multiple of any vector width (last dim and column kernel)
    y = _adversarial(24, 70, dtype, seed=4)
    for dim in (-1, 0):
        _check(y, "fp4_e2m1", f"70 columns {dtype} dim={dim}", dim=dim)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_block_sizes_from_one_lane_to_several_runs_or_rows_a_lane(dtype: torch.dtype) -> None:
    # last dim: lanes a block = next power of two >= block / (V * 4 runs held a lane), at most 32 (then runs read again)
    x = _adversarial(6, 1040, dtype, seed=7)
    for block in (1, 7, 8, 16, 64, 128, 256, 512, 1040, 4096):
        _check(x, "fp8_e4m3", f"block {block} {dtype}", block_size=block)
    # dim 0 (the column kernel): lanes a block = next power of two >= block / 8 rows held a lane, at
    # most 32 (then rows read again); blocks that do not divide the 300 rows; 24 columns: 3 bf16 runs
    w = _adversarial(300, 24, dtype, seed=9)
    for block in (1, 7, 8, 16, 33, 64, 256, 257, 300):
        _check(w, "fp8_e4m3", f"dim 0 block {block} {dtype}", dim=0, block_size=block)
    # a middle dim of a 3-d tensor, blocks that do not divide it
    z = _adversarial(3 * 45, 16, dtype, seed=8).view(3, 45, 16)
    for block in (7, 32, 64):
        _check(z, "fp6_e2m3", f"middle dim block {block} {dtype}", dim=1, block_size=block)


def test_wide_codes_and_unsigned_formats() -> None:
    # codes wider than a byte, stored one element at a time: int16 (a signed 12-bit integer) and
    # int32 (a 16-bit minifloat E6M9, an unsigned 10-bit integer); an unsigned 5-bit integer (uint8)
    x = _adversarial(16, 64, torch.float32, seed=6)
    for fmt in (FloatFormat(6, 9), IntFormat(12, signed=True), IntFormat(10, signed=False), IntFormat(5, signed=False)):
        for dim in (-1, 0):
            _check(x if fmt.signed else x.abs(), fmt, f"{fmt} dim={dim}", dim=dim)


def test_the_inputs_the_cuda_path_was_caught_on() -> None:
    # issue 23's draw (rows of normals times a logspace over 12 decades), NVFP4 in bfloat16
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(64, 1024, generator=g) * torch.logspace(-6, 6, 1024)).to(torch.bfloat16)
    for fmt, kw in (("nvfp4", {}), ("fp8_e4m3", {})):
        _check(x, fmt, f"issue draw {fmt}", **kw)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tensor_scale_kernel_equals_the_cpu_op(dtype: torch.dtype) -> None:
    # the one-thread kernel after the reduction: amax as the larger of hi and -lo, NaN for NaN / Inf,
    # the IEEE division, the 2^-126 floor; in each dtype's own bits (lo and hi are x's dtype)
    info = torch.finfo(dtype)
    cases = [_adversarial(40, 72, dtype), _adversarial(40, 72, dtype).nan_to_num(0.0, 0.0, 0.0),
             torch.tensor([-3000.0, 2999.0]), torch.zeros(3), torch.full((2,), -0.0), torch.tensor([info.tiny]),
             torch.tensor([-info.max, 1.0]), torch.tensor([1.0, float("inf")]), torch.tensor([float("-inf")])]
    for x in cases:
        x = x.to(dtype)
        spec = make_spec(x, "nvfp4")
        want = torch.ops.groupquant.tensor_scale(x, op_params(spec, x.dtype))
        lo, hi = torch.aminmax(x)
        got = emulated_cuda.tensor_scale_op(lo, hi, tensor_scale_divisor(spec.fmt, spec.scale_format))
        assert _same(got, want), f"{x.flatten()[:4].tolist()}: emulated {got.item()!r}, CPU op {want.item()!r}"


# ---- the packed GEMM ------------------------------------------------------------------------------

def _packed(fmt: str, n: int, k: int, seed: int = 0):
    """The packed weight the kernels read, of an ``[n, k]`` weight whose rows span 12 binades:
    an MX format in blocks of 32 (E8M0 scales), or NVFP4 through ``pack_model`` (UE4M3 scales in
    blocks of 16 and the tensor scale, ``has_global_scale``)."""
    import groupquant as gq
    from groupquant.ops.packed_gemm import PackedWeight
    from groupquant.ops.packed_gemm_params import packed_gemm_params
    from groupquant.ops.packed_tables import element_value_table, scale_table
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * torch.exp2(torch.randint(-6, 6, (n, 1), generator=g).float())
    if fmt == "nvfp4":
        layer = torch.nn.Linear(k, n, bias=False)
        layer.weight.data.copy_(w)
        packed = gq.pack_model(gq.quantize_model(torch.nn.Sequential(layer), recipe="nvfp4_weight_only",
                                                 quantize_head=True))
        return packed[0].state.kernel
    p = gq.pack(gq.quantize(w, fmt, block_size=32))
    return PackedWeight(p.data.reshape(-1).view(torch.uint8), p.scale.view(torch.uint8).reshape(n, -1),
                        element_value_table(p.fmt), scale_table(E8M0), packed_gemm_params(p.fmt, n, k, p.block_size))


@pytest.mark.parametrize("fmt", ["fp4_e2m1", "fp6_e3m2", "fp8_e4m3", "int8", "nvfp4"])
def test_packed_decode_and_linear(fmt: str) -> None:
    from groupquant.ops.packed_gemm import reference_packed_decode
    n, k = 37, 200  # out features not a multiple of the 8 warps a block, in features padded (224 / 208)
    w = _packed(fmt, n, k)
    p = w.params
    assert p.has_global_scale == (fmt == "nvfp4")
    width = p.num_blocks * p.block_size
    dst = torch.full((n, width), 77.0)
    emulated_cuda.packed_op(p.pack(), w.data, w.scale, w.value_table, w.scale_table, dst=dst)
    want = reference_packed_decode(w)
    assert torch.equal(dst[:, :k].view(torch.int32), want.view(torch.int32)), f"packed decode {fmt}"
    g = torch.Generator().manual_seed(1)
    for rows in (1, 8, 19):  # one tile, a full tile, tiles and a short one
        x = torch.zeros(rows, width)
        x[:, :k] = torch.randn(rows, k, generator=g)
        bias = torch.randn(n, generator=g)
        out = torch.full((rows, n), 77.0)
        emulated_cuda.packed_op(p.pack(), w.data, w.scale, w.value_table, w.scale_table, x=x, bias=bias, out=out)
        ref = x[:, :k].double() @ want.double().T + bias.double()
        err = (out.double() - ref).abs().max() / ref.abs().max()
        assert err < 1e-5, f"packed linear {fmt} rows={rows}: relative error {err:.2e}"
