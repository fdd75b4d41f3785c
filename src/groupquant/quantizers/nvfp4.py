"""NVFP4 quantizers: FP4 E2M1 elements in blocks of 16, UE4M3 block scales, a per-tensor float32
second scale (``g = amax / (448 * 6)``), as NVIDIA's kernels and torchao compute it.

Each gives exactly ``groupquant.fake_quant(x, "nvfp4", dim=dim)`` on the same data (``dim``: 1 for
weights, the layer's feature dim for activations). The single-level variant (block scales alone,
no tensor scale) is ``NVFP4Weight.let(tensor_scale=False)``. The quantizers declare
``block_scheme = "nvfp4"``: a subclass or variant that changes the element format, the scale
format or the block size is refused with an error naming the setting (subclass
``MXFloat4e2m1Weight`` with ``scale_format='ue4m3'`` and ``restrict_scaling_type=RestrictScaling.FP``
for FP4 with E4M3 scales in other blocks).
"""
from __future__ import annotations

from .base import ActQuantizer, FloatQuantizer, WeightQuantizer
from .block_scheme import scheme_mixin

__all__ = ["NVFP4Scaling", "NVFP4Weight", "NVFP4Act"]

#: NVFP4 scaling: ``block_scheme = "nvfp4"`` and the settings the scheme fixes (FP4 E2M1 elements,
#: groups of 16, UE4M3 scales ``e4m3(clamp((amax / 6) / g, 2^-6, 448))`` from each tensor, the
#: per-tensor float32 scale ``g``), filled from ``groupquant.formats.get_scheme("nvfp4")``.
NVFP4Scaling = scheme_mixin(
    "nvfp4", "NVFP4Scaling", __name__,
    "NVFP4 scaling: the settings of groupquant.formats.get_scheme('nvfp4') (FP4 E2M1 elements in groups of "
    "16, UE4M3 block scales from each tensor's abs-max, a float32 per-tensor scale).")


class NVFP4Weight(NVFP4Scaling, WeightQuantizer, FloatQuantizer):
    """NVFP4 weights: blocks of 16 along the input features."""


class NVFP4Act(NVFP4Scaling, ActQuantizer, FloatQuantizer):
    """NVFP4 activations (dynamic block and tensor scales from each batch)."""
