"""Packed inference: linear layers whose weight stays in its storage bits and is decoded inside the GEMM.

- :mod:`.packed_linear`: :class:`PackedLinear` (a packed weight, optional bias, input quantizer and
  online input rotation);
- :mod:`.pack_model`: :func:`pack_model` / :func:`unpack_model` / :func:`packed_layers`, a quantized model's
  ``QuantLinear`` layers to ``PackedLinear`` and back;
- :mod:`.packable`: the checks of what a packed layer takes (:class:`~..errors.PackError` names the layer).
"""
from __future__ import annotations

from .pack_model import pack_model, packed_layers, unpack_model
from .packed_linear import PackedLinear

__all__ = ["PackedLinear", "pack_model", "packed_layers", "unpack_model"]
