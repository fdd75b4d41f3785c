"""Public entry points: :func:`fake_quant` and :func:`quantize` (argument checks + dispatch).

Both run the native C++/CUDA op (:mod:`.native_ops`) when the extension is available for the
tensor's device, else the PyTorch reference; the results are the same bit for bit. A scale rule
the kernels do not implement (``float_log2``) always runs on the reference.
"""
from __future__ import annotations

from typing import Optional, Union

import torch

from ..formats import REFERENCE_RULES, ElementFormat, ScaleFormat
from . import native
from .fake_quant_result import FakeQuantResult
from .native_ops import native_fake_quant, native_fake_quant_with_scale, native_quantize
from .op_settings import FORMAT_BLOCK, MX_BLOCK, SUPPORTED_DTYPES, GroupSpec, check_tensor, draw_seed, op_settings
from .quantized import GroupQuantized
from .reference import reference_fake_quant, reference_fake_quant_parts, reference_quantize

__all__ = ["FORMAT_BLOCK", "MX_BLOCK", "fake_quant", "fake_quant_with_scale", "fake_quant_spec_with_scale",
           "quantize", "quantize_spec", "make_spec", "backend", "SUPPORTED_DTYPES", "STE_MODES", "check_ste"]

#: The gradient rules of the fake-quant ops and the quantizers (``ste``): straight through, or
#: zero where the element saturated.
STE_MODES = ("identity", "clipped")


class _ReferenceFakeQuant(torch.autograd.Function):
    """Reference fake-quant with a straight-through gradient (identity, or zero where saturated).

    Returns the values, the float32 scales and the per-tensor scale (an empty tensor without one;
    no gradient for either scale)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, spec: GroupSpec, ste: str):  # type: ignore[override]
        parts = reference_fake_quant_parts(x, spec, want_mask=(ste == "clipped"))
        ctx.save_for_backward(parts.mask if parts.mask is not None else torch.empty(0))
        ctx.clipped = parts.mask is not None
        ts = parts.tensor_scale if parts.tensor_scale is not None else torch.empty(0, device=x.device)
        ctx.mark_non_differentiable(parts.scale, ts)
        return parts.value, parts.scale, ts

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _grad_scale: torch.Tensor, _grad_ts: torch.Tensor):  # type: ignore[override]
        (inside,) = ctx.saved_tensors
        if ctx.clipped:
            grad = grad * inside.to(grad.dtype)
        return grad, None, None


def _use_native(x: torch.Tensor, spec: GroupSpec) -> bool:
    """Whether the native op runs for ``x``'s device (:func:`groupquant.ops.native.serves`) and
    ``spec``'s scale rule (the kernels refuse the :data:`~groupquant.formats.REFERENCE_RULES`)."""
    if spec.scale_rule in REFERENCE_RULES:
        return False
    return native.serves("cpu" if x.is_cpu else x.device.type)  # (is_cpu: cheaper than building x.device)


def backend() -> str:
    """``'native'`` when the C++ kernels serve CPU tensors (building them on first call), else ``'reference'``."""
    return native.backend()


def check_ste(ste: str) -> None:
    """ValueError naming ``ste`` unless it is a known gradient rule."""
    if ste not in STE_MODES:
        raise ValueError(f"ste must be one of {STE_MODES}, got {ste!r}")


def make_spec(x: torch.Tensor, fmt: Union[str, ElementFormat], block_size: Union[int, None, str] = FORMAT_BLOCK,
              dim: int = -1, rounding: str = "even", scale_mode: Optional[str] = None,
              generator: Optional[torch.Generator] = None, seed: Optional[int] = None, saturating: bool = True,
              scale_format: Union[None, str, ScaleFormat] = None, tensor_scale: Optional[bool] = None) -> GroupSpec:
    """Check every argument and bundle them for ``x``; errors name the argument at fault.

    The settings are :func:`~groupquant.ops.op_settings.op_settings` of the keywords (the one check);
    the record adds ``x``'s layout and the seed (:meth:`OpSettings.group_spec`)."""
    check_tensor(x)
    settings = op_settings(fmt, block_size=block_size, dim=dim, rounding=rounding, scale_mode=scale_mode,
                           saturating=saturating, scale_format=scale_format, tensor_scale=tensor_scale)
    return settings.group_spec(x, draw_seed(generator, seed) if rounding == "stochastic" else None)


def fake_quant(x: torch.Tensor, fmt: Union[str, ElementFormat], block_size: Union[int, None, str] = FORMAT_BLOCK,
               dim: int = -1, rounding: str = "even", scale_mode: Optional[str] = None, *,
               generator: Optional[torch.Generator] = None, seed: Optional[int] = None, ste: str = "identity",
               saturating: bool = True, scale_format: Union[None, str, ScaleFormat] = None,
               tensor_scale: Optional[bool] = None) -> torch.Tensor:
    """Quantize ``x`` group-wise to ``fmt`` and back (dequantized values, x's shape and dtype).

    Args:
        x: float32, bfloat16 or float16 tensor (computed exactly in float32).
        fmt: format name (``'fp8_e4m3'``, ``'fp8_e5m2'``, ``'fp6_e3m2'``, ``'fp6_e2m3'``,
            ``'fp4_e2m1'``, ``'int8'``, ``'mxfp4_e2m1'``, ... see ``groupquant.known_formats()``),
            an ``IntFormat`` / ``FloatFormat``, or the scheme name ``'nvfp4'`` (FP4 E2M1 elements in
            blocks of 16, UE4M3 block scales, a per-tensor float32 second scale; pass
            ``tensor_scale=False`` for the single-level variant).
        block_size: elements sharing one scale along ``dim`` (a quantizer's ``group_size``;
            default ``'auto'``: 32, MX; 16 for ``'nvfp4'``, which allows no other); ``None``, ``0`` or any
            size at least the dim's means the whole dim (one block). A dim that is not a multiple
            is zero-padded internally.
        dim: the dim along which groups run.
        rounding: ``'even'`` (nearest, ties to even; OCP), ``'nearest'`` (ties away from zero),
            ``'floor'`` (toward zero) or ``'stochastic'``.
        scale_mode: ``'floor'`` (OCP: 2**(floor(log2 amax) - emax)), ``'ceil'``, ``'even'``,
            ``'rceil'`` (power-of-two scales) or ``'float'`` (amax / max_normal); default: ``'floor'``
            for exponent scale formats, ``'float'`` for the others.
        generator / seed: randomness for ``rounding='stochastic'`` (one of them, not both).
        ste: gradient rule: ``'identity'`` (straight-through) or ``'clipped'`` (zero gradient
            where ``|x / scale|`` exceeded max normal, i.e. the element saturated).
        saturating: ``True`` (OCP MX): elements beyond max normal become +-max normal. ``False``
            (non-saturating minifloats, as Brevitas offers them; formats with Inf or NaN codes
            only): the element is rounded as if the exponent range had no top, and one whose
            rounded magnitude exceeds max normal becomes +-Inf (formats with Inf, e.g.
            ``fp8_e5m2``) or NaN (NaN-only formats such as ``fp8_e4m3``, FNUZ): for e4m3,
            464 -> 448 (tie to even), 470 -> NaN.
        scale_format: the block scale's number format: ``'e8m0'`` (default, MX), ``'e{k}m0'``
            (k-bit exponent, microxcaling's scale_bits), ``'ue4m3'`` (NVFP4's) or any ``'ue{e}m{m}'``,
            ``'float32'``, ``'bfloat16'``, or a ``groupquant.formats`` scale format object.
            ``scale_mode='float'`` alone means ``'float32'``.
        tensor_scale: add the per-tensor float32 second scale ``g = amax / (max_scale * max_normal)``
            (minifloat scale formats only; default False, True for ``'nvfp4'``). See
            :mod:`groupquant.ops.shared_scale` for the exact arithmetic, all-zero tensors and NaN/Inf.

    Returns:
        A tensor of ``x``'s shape, dtype and device holding ``element * scale`` per group: the values
        a dequantized MX tensor holds. Equal bit for bit to ``quantize(x, ...).dequantize()``.

    Raises:
        TypeError: ``x`` is not a float32/bfloat16/float16 tensor, or ``fmt`` is neither a name nor
            a format object; ``block_size`` not an int (or one beyond int64). ValueError: an unknown
            format name, rounding, scale mode or ste, a ``dim`` out of range, a negative
            ``block_size``, both ``seed`` and ``generator``, ``saturating=False`` for a format
            without Inf/NaN codes. Each message names the argument.

    Spec rules (OCP MX v1.0): elements round then saturate to +-max normal; subnormals are kept;
    the shared exponent is clamped to [-127, 127]; an all-zero group gets scale 2**-127; a group
    containing NaN or Inf becomes all NaN.

    Example::

        >>> x = torch.tensor([[0.3, -1.7, 5.0, 0.01] * 8])      # one block of 32
        >>> y = fake_quant(x, "fp4_e2m1")                          # amax 5 -> scale 2**(2 - 2) = 1
        >>> y[0, :4].tolist()                                      # onto {0, 0.5, 1, 1.5, 2, 3, 4, 6}
        [0.5, -1.5, 4.0, 0.0]

    Gradients (when ``x.requires_grad``) pass straight through (``ste``). The computation runs in
    the native C++/CUDA kernel when it is built (see ``groupquant.ops.backend()``), else in the
    PyTorch reference; both give the same bits.
    """
    spec = make_spec(x, fmt, block_size=block_size, dim=dim, rounding=rounding, scale_mode=scale_mode,
                     generator=generator, seed=seed, saturating=saturating, scale_format=scale_format,
                     tensor_scale=tensor_scale)
    check_ste(ste)
    if _use_native(x, spec):
        return native_fake_quant(x, spec, ste)
    if torch.is_grad_enabled() and x.requires_grad:
        return _ReferenceFakeQuant.apply(x, spec, ste)[0]
    return reference_fake_quant(x, spec)[0]


def fake_quant_with_scale(x: torch.Tensor, fmt: Union[str, ElementFormat], block_size: Union[int, None, str] = FORMAT_BLOCK,
                          dim: int = -1, rounding: str = "even", scale_mode: Optional[str] = None, *,
                          generator: Optional[torch.Generator] = None, seed: Optional[int] = None,
                          ste: str = "identity", saturating: bool = True,
                          scale_format: Union[None, str, ScaleFormat] = None,
                          tensor_scale: Optional[bool] = None) -> FakeQuantResult:
    """:func:`fake_quant` and the shared scales it used, from one pass over ``x``.

    Arguments as :func:`fake_quant`. ``result.value`` equals ``fake_quant(x, ...)`` bit for bit
    (same gradient); ``result.scale`` (float32, contracted scale shape ``S[:d] + (k, 1) + S[d+1:]``,
    no gradient) equals ``quantize(x, ...).scale``; ``result.tensor_scale`` is the per-tensor scale ``g``
    of two-level scaling (NVFP4; else None): ``value == (element * scale) * g``.
    """
    spec = make_spec(x, fmt, block_size=block_size, dim=dim, rounding=rounding, scale_mode=scale_mode,
                     generator=generator, seed=seed, saturating=saturating, scale_format=scale_format,
                     tensor_scale=tensor_scale)
    check_ste(ste)
    return fake_quant_spec_with_scale(x, spec, ste)


def fake_quant_spec_with_scale(x: torch.Tensor, spec: GroupSpec, ste: str = "identity") -> FakeQuantResult:
    """:func:`fake_quant_with_scale` for a spec that :func:`make_spec` made for a tensor of ``x``'s
    shape and dtype (callers that quantize tensors of one shape again and again keep the spec)."""
    if _use_native(x, spec):
        return native_fake_quant_with_scale(x, spec, ste)
    if torch.is_grad_enabled() and x.requires_grad:
        value, scale, ts = _ReferenceFakeQuant.apply(x, spec, ste)
        return FakeQuantResult(value, scale, tensor_scale=ts if spec.tensor_scale else None)
    parts = reference_fake_quant_parts(x, spec)
    return FakeQuantResult(parts.value, parts.scale, tensor_scale=parts.tensor_scale)


def quantize(x: torch.Tensor, fmt: Union[str, ElementFormat], block_size: Union[int, None, str] = FORMAT_BLOCK,
             dim: int = -1, rounding: str = "even", scale_mode: Optional[str] = None, *,
             generator: Optional[torch.Generator] = None, seed: Optional[int] = None, saturating: bool = True,
             scale_format: Union[None, str, ScaleFormat] = None, tensor_scale: Optional[bool] = None) -> GroupQuantized:
    """Quantize ``x`` group-wise to ``fmt``: element codes and shared scales (contracted layout).

    Arguments as :func:`fake_quant`. ``result.dequantize()`` equals ``fake_quant(x, ...)`` bit for bit.
    ``result.codes`` holds the format's bit encodings, ``result.scale_codes`` the scale format's
    bytes (E8M0 for MX, UE4M3 for NVFP4; None for float32 / bfloat16 scales), ``result.tensor_scale``
    the per-tensor scale of two-level scaling (else None); with
    ``saturating=False`` an overflowing element is the format's Inf code (with its sign) or NaN code.
    """
    spec = make_spec(x, fmt, block_size=block_size, dim=dim, rounding=rounding, scale_mode=scale_mode,
                     generator=generator, seed=seed, saturating=saturating, scale_format=scale_format,
                     tensor_scale=tensor_scale)
    return quantize_spec(x, spec)


def quantize_spec(x: torch.Tensor, spec: GroupSpec) -> GroupQuantized:
    """:func:`quantize` for a spec made for a tensor of ``x``'s shape (by :func:`make_spec` or
    :meth:`OpSettings.group_spec`): codes, scales and scale codes as the op returns them."""
    if _use_native(x, spec):
        return native_quantize(x, spec)
    return reference_quantize(x, spec)
