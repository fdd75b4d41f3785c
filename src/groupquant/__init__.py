"""groupquant: declarative group-wise (OCP Microscaling) quantization for PyTorch.

Quick use::

    import groupquant as gq
    y = gq.fake_quant(x, "fp4_e2m1")          # MXFP4, blocks of 32 along the last dim
    q = gq.quantize(x, "fp8_e4m3")            # codes + E8M0 scales, q.dequantize() == fake_quant
    p = gq.pack(q)                            # storage form: float8_e4m3fn codes + E8M0 bytes
    z = gq.fake_quant(x, "nvfp4")             # NVFP4: FP4 in blocks of 16, UE4M3 scales, FP32 tensor scale
    model = gq.pack_model(model)              # QuantLinear -> PackedLinear (inference from packed weights)
"""
from .formats import (E8M0, MX_FORMATS, NVFP4, UE4M3, ExponentScale, FloatFormat, FloatScale, IntFormat, SpecialValues,
                      get_format, get_scale_format, known_formats, known_scale_formats)
from .ops import GroupQuantized, fake_quant, quantize
from .packing import PackedTensor, pack
from . import nn, proxy, quant_tensor, quantizers  # declarative quantizers, quant tensors, layers
from .nn import quantize_model
from .export import pack_model, unpack_model
from .quantizers import describe
from .calib import ptq  # calibration entry (docs/calibration.md)

__version__ = "0.1.0"

__all__ = [
    "E8M0", "MX_FORMATS", "FloatFormat", "IntFormat", "SpecialValues", "get_format", "known_formats",
    "NVFP4", "UE4M3", "ExponentScale", "FloatScale", "get_scale_format", "known_scale_formats",
    "GroupQuantized", "fake_quant", "quantize", "PackedTensor", "pack", "__version__", "describe",
    "quantize_model", "pack_model", "unpack_model", "nn", "proxy", "quantizers", "quant_tensor",
]
