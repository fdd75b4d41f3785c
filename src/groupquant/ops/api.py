"""Public entry points: :func:`fake_quant` and :func:`quantize` (argument checks + dispatch).

Both run the native C++/CUDA op (:mod:`.native_ops`) when the extension is available for the
tensor's device, else the PyTorch reference; the results are the same bit for bit. A scale rule
the kernels do not implement (``float_log2``) always runs on the reference.
"""
from __future__ import annotations

from typing import Optional, Union

import torch

from ..formats import (REFERENCE_RULES, ElementFormat, ScaleFormat, check_scale_setup, get_format, get_scale_format,
                       get_scheme)
from . import native
from .element_round import ROUNDING_MODES, check_saturating
from .group_layout import GroupLayout
from .fake_quant_result import FakeQuantResult
from .native_ops import native_fake_quant, native_fake_quant_with_scale, native_quantize
from .quantized import GroupQuantized
from .reference import GroupSpec, reference_fake_quant, reference_fake_quant_parts, reference_quantize

__all__ = ["FORMAT_BLOCK", "MX_BLOCK", "fake_quant", "fake_quant_with_scale", "fake_quant_spec_with_scale", "quantize", "make_spec", "backend", "SUPPORTED_DTYPES", "STE_MODES"]

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


#: Default ``block_size`` of the functional ops: the named format's own block (NVFP4: 16), else 32
#: (MX). A plain string, so torch.compile traces the default like any constant.
FORMAT_BLOCK = "auto"
#: The block of a format that names none (the OCP MX block).
MX_BLOCK = 32
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
    if spec.scale_mode in REFERENCE_RULES:
        return False
    return native.serves("cpu" if x.is_cpu else x.device.type)  # (is_cpu: cheaper than building x.device)


def backend() -> str:
    """``'native'`` when the C++ kernels serve CPU tensors (building them on first call), else ``'reference'``."""
    return native.backend()


def _check_tensor(x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"x has dtype {x.dtype}; groupquant quantizes float32, bfloat16 and float16 tensors "
            "(convert with x.float() first)")
    return x


def _check_ste(ste: str) -> None:
    """ValueError naming ``ste`` unless it is a known gradient rule."""
    if ste not in STE_MODES:
        raise ValueError(f"ste must be one of {STE_MODES}, got {ste!r}")


def _draw_seed(generator: Optional[torch.Generator], seed: Optional[int]) -> int:
    """The seed of the stochastic-rounding hash: given, or drawn from ``generator`` (or torch's global RNG).

    ValueError when both are given (one would be silently ignored)."""
    if seed is not None and generator is not None:
        raise ValueError("give either seed or generator for rounding='stochastic', not both "
                         f"(seed={seed!r}, generator={generator!r})")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        return seed & 0xFFFFFFFF
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    device = generator.device if generator is not None else "cpu"
    return int(torch.randint(0, 2 ** 31 - 1, (1,), generator=generator, device=device).item())


def _resolve_scheme(fmt: object, block_size: Union[int, None, str], scale_format: Union[None, str, ScaleFormat],
                    tensor_scale: Optional[bool], scale_mode: Optional[str]) -> tuple:
    """(element format, block size, scale format, tensor scale) for ``fmt`` and the scale arguments.

    A scheme name (``'nvfp4'``) fixes its element and scale formats and its block; a conflicting
    argument is a ValueError naming it. Otherwise the scale format stays None (the one ``scale_mode``
    implies, see :func:`groupquant.formats.check_scale_setup`) and ``tensor_scale`` defaults to False."""
    scheme = get_scheme(fmt)
    if scheme is None:
        sf = None if scale_format is None else get_scale_format(scale_format)
        if isinstance(block_size, str) and block_size == FORMAT_BLOCK:
            block_size = MX_BLOCK
        return get_format(fmt), block_size, sf, False if tensor_scale is None else tensor_scale
    if isinstance(block_size, str) and block_size == FORMAT_BLOCK:
        block_size = scheme.block_size
    elif block_size != scheme.block_size:
        raise ValueError(
            f"{scheme.name.upper()} uses blocks of {scheme.block_size}, got block_size={block_size!r}; for "
            f"{scheme.element.name} elements with {scheme.scale_format.name} scales in other blocks use "
            f"fmt={scheme.element.name!r}, scale_format={scheme.scale_format.name!r}")
    if scale_format is not None and get_scale_format(scale_format) != scheme.scale_format:
        raise ValueError(f"{scheme.name.upper()} stores its block scales as {scheme.scale_format.name}, got "
                         f"scale_format={scale_format!r}; leave it unset")
    ts = scheme.tensor_scale if tensor_scale is None else tensor_scale
    return scheme.element, block_size, scheme.scale_format, ts


def make_spec(x: torch.Tensor, fmt: Union[str, ElementFormat], block_size: Union[int, None, str] = FORMAT_BLOCK,
              dim: int = -1, rounding: str = "even", scale_mode: Optional[str] = None,
              generator: Optional[torch.Generator] = None, seed: Optional[int] = None, saturating: bool = True,
              scale_format: Union[None, str, ScaleFormat] = None, tensor_scale: Optional[bool] = None) -> GroupSpec:
    """Check every argument and bundle them; errors name the argument at fault.

    ``scale_mode='float'`` without a ``scale_format`` means float32 scales (as before scale formats)."""
    _check_tensor(x)
    element_format, block_size, sf, ts = _resolve_scheme(fmt, block_size, scale_format, tensor_scale, scale_mode)
    if rounding not in ROUNDING_MODES:
        raise ValueError(f"rounding must be one of {ROUNDING_MODES}, got {rounding!r}")
    sf, mode, ts = check_scale_setup(sf, scale_mode, tensor_scale=ts)  # errors name scale_mode / scale_format
    check_saturating(saturating, element_format)
    layout = GroupLayout.build(x.shape, dim, block_size)
    drawn = _draw_seed(generator, seed) if rounding == "stochastic" else None
    return GroupSpec(fmt=element_format, layout=layout, rounding=rounding, scale_mode=mode, seed=drawn,
                     saturating=saturating, scale_format=sf, tensor_scale=ts)


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
    spec = make_spec(x, fmt, block_size, dim, rounding, scale_mode, generator, seed, saturating, scale_format,
                     tensor_scale)
    _check_ste(ste)
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
    spec = make_spec(x, fmt, block_size, dim, rounding, scale_mode, generator, seed, saturating, scale_format,
                     tensor_scale)
    _check_ste(ste)
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
    spec = make_spec(x, fmt, block_size, dim, rounding, scale_mode, generator, seed, saturating, scale_format,
                     tensor_scale)
    if _use_native(x, spec):
        return native_quantize(x, spec)
    return reference_quantize(x, spec)
