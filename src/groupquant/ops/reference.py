"""The PyTorch reference of group-wise quantization: the definition every kernel must match.

Steps, all in float32 and exact (see :mod:`.shared_scale` and :mod:`.element_round`):
contract (pad) -> per-group amax -> shared scale -> ``x / scale`` -> round and saturate onto the
element grid -> ``* scale`` -> expand (drop padding) -> cast to the input dtype.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from .codes import encode
from .denormals import keeping_denormals
from .element_round import round_to_format, uniform_from_hash
from .op_settings import GroupSpec
from .quantized import GroupQuantized
from .shared_scale import group_scale, tensor_scale_of

_F32_MAX = torch.finfo(torch.float32).max

__all__ = ["GroupSpec", "reference_fake_quant", "reference_quantize",
           "stochastic_noise", "ReferenceFakeQuantParts", "tensor_scale_for"]


def stochastic_noise(spec: GroupSpec, device: torch.device) -> Optional[torch.Tensor]:
    """Uniform [0, 1) per element (contracted layout), hashed from the element's index in the input."""
    if spec.rounding != "stochastic":
        return None
    idx = torch.arange(torch.Size(spec.layout.shape).numel(), dtype=torch.int64, device=device)
    idx = spec.layout.contract(idx.view(spec.layout.shape))
    return uniform_from_hash(idx, spec.seed)


@dataclass(frozen=True)
class _Quantized:
    """Contracted intermediate results: element values, float32 scale, scale codes, scaled input,
    and the per-tensor scale (0-d float32, or None)."""

    elements: torch.Tensor
    scale: torch.Tensor
    scale_codes: torch.Tensor
    scaled: torch.Tensor
    tensor_scale: Optional[torch.Tensor]

    def dequantized(self) -> torch.Tensor:
        """``(elements * scale) * tensor_scale`` (contracted, float32)."""
        out = self.elements * self.scale
        return out if self.tensor_scale is None else out * self.tensor_scale


def tensor_scale_for(x: torch.Tensor, spec: GroupSpec) -> Optional[torch.Tensor]:
    """The per-tensor scale ``g`` of ``x`` under ``spec`` (0-d float32), or None without one."""
    return tensor_scale_of(x, spec.fmt, spec.scale_format) if spec.tensor_scale else None


def _quantize_values(x: torch.Tensor, spec: GroupSpec) -> _Quantized:
    """Element values, scale and scale codes of x, all contracted (float32, float32, uint8)."""
    xg = spec.layout.contract(x.detach().float())
    amax = xg.abs().amax(dim=spec.layout.reduce_dim, keepdim=True)
    g = tensor_scale_for(x, spec)
    scale, scale_codes = group_scale(amax, spec.fmt, spec.scale_rule, x.dtype, spec.scale_format, g)
    noise = stochastic_noise(spec, x.device)
    if getattr(spec.scale_format, "flush_subnormal_blocks", False):  # all-zero blocks (signed zeros)
        xg = xg * (spec.scale_format.keeps(amax, spec.scale_rule, x.dtype) | (amax == 0)
                   | ~torch.isfinite(amax)).float()
    if g is None:
        scaled = xg / scale
    else:  # (1 / g) / s saturates at float32's max (see shared_scale): Inf would make 0 * Inf = NaN
        scaled = xg * (torch.div(torch.ones_like(g), g) / scale).clamp_max(_F32_MAX)
    elements = round_to_format(scaled, spec.fmt, spec.rounding, noise, spec.saturating)
    return _Quantized(elements, scale, scale_codes, scaled, g)


@dataclass(frozen=True)
class ReferenceFakeQuantParts:
    """Everything one reference fake-quant pass gives: values (x's shape and dtype), the
    clipped-STE mask (or None), the float32 scales (contracted scale shape) and the per-tensor
    scale (0-d, or None)."""

    value: torch.Tensor
    mask: Optional[torch.Tensor]
    scale: torch.Tensor
    tensor_scale: Optional[torch.Tensor] = None


def reference_fake_quant_parts(x: torch.Tensor, spec: GroupSpec, want_mask: bool = False) -> ReferenceFakeQuantParts:
    """Quantize-dequantize ``x`` by ``spec``, keeping the mask (if ``want_mask``) and the scales.

    Subnormals are kept whatever ``torch.set_flush_denormal`` says (see :mod:`.denormals`)."""
    return keeping_denormals(lambda: _fake_quant_parts(x, spec, want_mask))


def _fake_quant_parts(x: torch.Tensor, spec: GroupSpec, want_mask: bool) -> ReferenceFakeQuantParts:
    """:func:`reference_fake_quant_parts` under the thread's current flush-denormal mode."""
    q = _quantize_values(x, spec)
    out = spec.layout.expand(q.dequantized()).to(x.dtype)
    mask = spec.layout.expand(q.scaled.abs() <= spec.fmt.max_normal) if want_mask else None
    return ReferenceFakeQuantParts(out, mask, q.scale, q.tensor_scale)


def reference_fake_quant(x: torch.Tensor, spec: GroupSpec,
                         want_mask: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Quantize-dequantize ``x`` by ``spec`` (same shape and dtype as ``x``).

    With ``want_mask`` also returns a bool tensor of x's shape, True where ``|x / scale|`` did
    not exceed max normal (the elements that did not saturate; the clipped-STE gradient mask).
    """
    parts = reference_fake_quant_parts(x, spec, want_mask)
    return parts.value, parts.mask


def reference_quantize(x: torch.Tensor, spec: GroupSpec) -> GroupQuantized:
    """Element codes and shared scales of ``x`` by ``spec`` (subnormals kept, see :mod:`.denormals`)."""
    return keeping_denormals(lambda: _quantize(x, spec))


def _quantize(x: torch.Tensor, spec: GroupSpec) -> GroupQuantized:
    """:func:`reference_quantize` under the thread's current flush-denormal mode."""
    q = _quantize_values(x, spec)
    return GroupQuantized(codes=encode(q.elements, spec.fmt), scale=q.scale,
                          scale_codes=spec.scale_format.kept_codes(q.scale_codes), fmt=spec.fmt, layout=spec.layout,
                          dtype=x.dtype, scale_format=spec.scale_format, tensor_scale=q.tensor_scale)
