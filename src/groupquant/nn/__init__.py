"""Quant layers: drop-in replacements for torch layers, and model conversion.

``QuantLinear``, ``QuantConv1d``, ``QuantConv2d`` take their torch layer's arguments plus
``weight_quant``, ``input_quant``, ``output_quant``, ``bias_quant`` (quantizer classes, None
means float) and prefixed settings (``weight_bit_width=4``). ``QuantIdentity`` / ``QuantReLU``
take ``input_quant`` / ``output_quant``. ``quantize_model`` converts an existing model.
"""
from .activation import QuantIdentity, QuantReLU
from .conv import QuantConv1d, QuantConv2d
from .convert import quantize_model
from .linear import QuantLinear
from .quant_layer import QuantLayerMixin

__all__ = ["QuantConv1d", "QuantConv2d", "QuantIdentity", "QuantLayerMixin", "QuantLinear", "QuantReLU",
           "quantize_model"]
