"""OpSettings: the settings of one group-wise quantization op, as one frozen record.

Element format, block size and grouped dim, element rounding, scale rule, saturation, scale
format and the per-tensor second scale: everything :func:`groupquant.fake_quant` /
:func:`groupquant.quantize` take besides the tensor and its randomness. Two places build it:

- :func:`op_settings`, from the functional ops' keywords (the one check of those keywords: a
  scheme name such as ``'nvfp4'`` resolved to its formats and block, the scale set-up by
  :func:`groupquant.formats.check_scale_setup`, rounding and saturation);
- :meth:`groupquant.core.QuantSpec.op_settings`, from a quantizer already resolved and checked
  (no second check).

:meth:`OpSettings.group_spec` adds what one call needs (the tensor's :class:`GroupLayout` and
the stochastic-rounding seed) and gives the :class:`~groupquant.ops.reference.GroupSpec` the
reference and the native ops read. ``scale_rule`` is the scale rule's one name from here down
(``floor`` / ``ceil`` / ``even`` / ``rceil`` / ``float_log2`` / ``float``; the functional ops'
keyword is ``scale_mode``, the quantizers' setting ``scale_rounding`` with ``restrict_scaling_type``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import torch

from ..formats import ElementFormat, ScaleFormat, check_scale_setup, get_format, get_scale_format, get_scheme
from .element_round import ROUNDING_MODES, check_saturating
from .group_layout import GroupLayout

__all__ = ["OpSettings", "GroupSpec", "op_settings", "FORMAT_BLOCK", "MX_BLOCK", "SUPPORTED_DTYPES", "check_tensor",
           "draw_seed"]

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

#: Default ``block_size`` of the functional ops: the named format's own block (NVFP4: 16), else 32
#: (MX). A plain string, so torch.compile traces the default like any constant.
FORMAT_BLOCK = "auto"
#: The block of a format that names none (the OCP MX block).
MX_BLOCK = 32


@dataclass(frozen=True)
class OpSettings:
    """What one group-wise quantization op does, checked (see the module doc).

    Fields:
        fmt: the element format.
        block_size: elements sharing one scale along ``dim``; None, 0 or at least the dim's size
            means the whole dim (checked and resolved per tensor by :meth:`GroupLayout.build`).
        dim: the grouped dim (may be negative: resolved per tensor).
        rounding: element rounding (``even`` / ``nearest`` / ``floor`` / ``stochastic``).
        scale_rule: how a block's scale comes from its amax (one of the scale format's ``rules``).
        saturating: elements beyond max normal become +-max normal (False: Inf / NaN by the format).
        scale_format: the block scales' number format (E8M0 for MX, UE4M3 for NVFP4, ...).
        tensor_scale: a per-tensor float32 second scale (two-level scaling, NVFP4).

    No defaults (built by keyword): torch.compile (2.11) cannot bind a call whose defaults hold objects.
    """

    fmt: ElementFormat
    block_size: Optional[int]
    dim: int
    rounding: str
    scale_rule: str
    saturating: bool
    scale_format: ScaleFormat
    tensor_scale: bool

    def layout_of(self, shape: Sequence[int]) -> GroupLayout:
        """The group layout of a tensor of ``shape`` under these settings."""
        return GroupLayout.build(torch.Size(shape), self.dim, self.block_size)

    def group_spec(self, x: torch.Tensor, seed: Optional[int] = None) -> GroupSpec:
        """The per-call record for tensor ``x``: these settings, ``x``'s layout and the seed of
        stochastic rounding (drawn from torch's global generator when None; ignored otherwise).
        TypeError unless ``x`` is a float32 / bfloat16 / float16 tensor."""
        check_tensor(x)
        if self.rounding == "stochastic" and seed is None:
            seed = draw_seed(None, None)
        return GroupSpec(fmt=self.fmt, block_size=self.block_size, dim=self.dim, rounding=self.rounding,
                         scale_rule=self.scale_rule, saturating=self.saturating, scale_format=self.scale_format,
                         tensor_scale=self.tensor_scale, layout=self.layout_of(x.shape),
                         seed=seed if self.rounding == "stochastic" else None)


@dataclass(frozen=True)
class GroupSpec(OpSettings):
    """One call of a group-wise op: its settings (the :class:`OpSettings` fields), the tensor's
    :class:`GroupLayout` (``block_size`` and ``dim`` resolved for its shape) and the seed of
    stochastic rounding (None for the other roundings); built by :meth:`OpSettings.group_spec`.
    The reference (:mod:`.reference`) and the native ops' parameter record (:mod:`.kernel_params`)
    read it. No defaults, as :class:`OpSettings`."""

    layout: GroupLayout
    seed: Optional[int]


def check_tensor(x: object) -> torch.Tensor:
    """``x`` when it is a tensor of a dtype the ops quantize, else a TypeError naming ``x``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"x has dtype {x.dtype}; groupquant quantizes float32, bfloat16 and float16 tensors "
            "(convert with x.float() first)")
    return x


def draw_seed(generator: Optional[torch.Generator], seed: Optional[int]) -> int:
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
                    tensor_scale: Optional[bool]) -> tuple:
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


def op_settings(fmt: Union[str, ElementFormat], *, block_size: Union[int, None, str], dim: int, rounding: str,
                scale_mode: Optional[str], saturating: bool, scale_format: Union[None, str, ScaleFormat],
                tensor_scale: Optional[bool]) -> OpSettings:
    """The settings of the functional ops' keywords, checked once; errors name the keyword at fault.

    ``block_size='auto'`` (:data:`FORMAT_BLOCK`) is the scheme's block (NVFP4: 16), else 32;
    ``scale_mode`` None is the scale format's default rule (``scale_mode='float'`` alone means
    float32 scales). See :func:`groupquant.fake_quant` for every keyword. The record of keywords
    seen before is remembered (a functional call in a loop checks them once)."""
    args = (fmt, block_size, dim, rounding, scale_mode, saturating, scale_format, tensor_scale)
    if torch.compiler.is_compiling() or not _hashable(args):  # (traced once; an odd argument gets its error)
        return _checked(*args)
    return _remembered(*args)


def _hashable(args: tuple) -> bool:
    try:
        hash(args)
    except TypeError:
        return False
    return True


def _checked(fmt: object, block_size: object, dim: object, rounding: object, scale_mode: object, saturating: object,
             scale_format: object, tensor_scale: object) -> OpSettings:
    """:func:`op_settings`'s check and record (arguments in its order)."""
    element_format, block, sf, ts = _resolve_scheme(fmt, block_size, scale_format, tensor_scale)
    if rounding not in ROUNDING_MODES:
        raise ValueError(f"rounding must be one of {ROUNDING_MODES}, got {rounding!r}")
    sf, rule, ts = check_scale_setup(sf, scale_mode, tensor_scale=ts)  # errors name scale_mode / scale_format
    check_saturating(saturating, element_format)
    return OpSettings(fmt=element_format, block_size=block, dim=dim, rounding=rounding,
                      scale_rule=rule, saturating=saturating, scale_format=sf, tensor_scale=ts)


#: :func:`_checked` per distinct arguments (``typed``: ``True`` and ``1`` are different arguments).
_remembered = functools.lru_cache(maxsize=256, typed=True)(_checked)
