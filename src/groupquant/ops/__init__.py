"""The math of group-wise quantization: group layout, shared scales, element rounding, codes.

The PyTorch reference here defines the numerics; native kernels must match it bit for bit.
Elements per scale are ``block_size`` in every name here (a quantizer's setting for the same
number is ``group_size``; :mod:`.group_layout` states the rule).
"""
from .api import (STE_MODES, SUPPORTED_DTYPES, backend, check_ste, fake_quant, fake_quant_spec_with_scale,
                  fake_quant_with_scale, make_spec, quantize, quantize_spec)
from .op_settings import OpSettings, op_settings
from .codes import code_dtype, decode, encode
from .fake_quant_result import FakeQuantResult
from .element_round import ROUNDING_MODES, round_to_format
from .group_layout import GroupLayout
from .quantized import GroupQuantized
from .reference import GroupSpec, reference_fake_quant, reference_quantize
from .shared_scale import (SCALE_MODES, decode_scale, e8m0_decode, e8m0_encode, encode_scale, group_scale, shared_exponent,
                           tensor_scale_of)

__all__ = [
    "STE_MODES", "check_ste", "SUPPORTED_DTYPES", "backend", "fake_quant", "fake_quant_with_scale", "fake_quant_spec_with_scale", "FakeQuantResult", "make_spec", "quantize",
    "quantize_spec", "OpSettings", "op_settings",
    "code_dtype", "decode", "encode", "ROUNDING_MODES", "round_to_format", "GroupLayout", "GroupQuantized",
    "GroupSpec", "reference_fake_quant", "reference_quantize", "SCALE_MODES",
    "decode_scale", "e8m0_decode", "e8m0_encode", "encode_scale", "group_scale", "shared_exponent", "tensor_scale_of",
]
