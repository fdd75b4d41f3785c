"""groupquant: declarative group-wise (OCP Microscaling) quantization for PyTorch.

Quick use::

    import groupquant as gq
    y = gq.fake_quant(x, "fp4_e2m1")          # MXFP4, blocks of 32 along the last dim
    q = gq.quantize(x, "fp8_e4m3")            # codes + E8M0 scales, q.dequantize() == fake_quant
    p = gq.pack(q)                            # storage form: float8_e4m3fn codes + E8M0 bytes
    z = gq.fake_quant(x, "nvfp4")             # NVFP4: FP4 in blocks of 16, UE4M3 scales, FP32 tensor scale
    model = gq.pack_model(model)              # QuantLinear -> PackedLinear (inference from packed weights)
    gq.save(model, "m.gguf", format="gguf")   # also "safetensors", "compressed-tensors"; gq.load(path, model)
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, List, Tuple

from .formats import (E8M0, MX_FORMATS, NVFP4, UE4M3, ExponentScale, FloatFormat, FloatScale, IntFormat, SpecialValues,
                      get_format, get_scale_format, known_formats, known_scale_formats)
from .ops import GroupQuantized, fake_quant, quantize

__version__ = "0.1.0"

#: Names loaded on first use (PEP 562), so that ``import groupquant`` costs what ``fake_quant``
#: needs (formats and ops) and not the layers, quantizers, packing and export: public name ->
#: (module, attribute in it; None for the module itself).
_LAZY: Dict[str, Tuple[str, Any]] = {
    "PackedTensor": (".packing", "PackedTensor"),
    "pack": (".packing", "pack"),
    "nn": (".nn", None),
    "proxy": (".proxy", None),
    "quant_tensor": (".quant_tensor", None),
    "quantizers": (".quantizers", None),
    "quantize_model": (".nn", "quantize_model"),
    "pack_model": (".export", "pack_model"),
    "unpack_model": (".export", "unpack_model"),
    "describe": (".quantizers", "describe"),
    "calib": (".calib", None),
    "ptq": (".calib", "ptq"),
    "train": (".calib.qat", None),
    "qat": (".calib.qat", "qat"),
    "eval": (".eval", None),
    "save": (".export.checkpoints.save_load", "save"),
    "load": (".export.checkpoints.save_load", "load"),
}

__all__ = [
    "E8M0", "MX_FORMATS", "FloatFormat", "IntFormat", "SpecialValues", "get_format", "known_formats",
    "NVFP4", "UE4M3", "ExponentScale", "FloatScale", "get_scale_format", "known_scale_formats",
    "GroupQuantized", "fake_quant", "quantize", "PackedTensor", "pack", "__version__", "describe",
    "quantize_model", "pack_model", "unpack_model", "nn", "proxy", "quantizers", "quant_tensor",
    "calib", "ptq", "train", "qat", "eval", "save", "load",
]


def __getattr__(name: str) -> Any:
    """Load a public name of :data:`_LAZY` on first use and keep it as a module attribute."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name, __name__)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    """The module's names, the lazily loaded ones included."""
    return sorted(set(globals()) | set(_LAZY))
