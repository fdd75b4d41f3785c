"""Quant layers: drop-in replacements for torch layers, and model conversion.

``QuantLinear``, ``QuantConv1d``, ``QuantConv2d``, ``QuantConv3d`` take their torch layer's arguments plus
``weight_quant``, ``input_quant``, ``output_quant``, ``bias_quant`` (quantizer classes, None
means float), the backward slots (``grad_output_quant`` and the per-GEMM overrides, see
:mod:`groupquant.nn.gemm.grad_slots`), ``gemm_rounding`` (:class:`GemmRounding`: element-wise roundings of operands,
output and gradients), ``grad_weight_groups`` and prefixed settings (``weight_bit_width=4``). ``QuantMatMul`` /
``quant_matmul`` multiply two activations. ``QuantIdentity`` / ``QuantReLU`` take
``input_quant`` / ``output_quant`` (or Brevitas's ``act_quant``). ``quantize_model`` converts an
existing model, with quantizers or a training recipe (``RECIPES``). ``is_quant_layer`` /
``iter_quant_layers`` find a model's quant layers (the quant-layer protocol, :mod:`groupquant.nn.layers.quant_layers`).
"""
from .layers.activation import QuantIdentity, QuantReLU
from .layers.conv import QuantConv1d, QuantConv2d, QuantConv3d
from .convert import quantize_model, remove_functional
from .gemm.gemm_rounding import GemmRounding
from .gemm.grad_slots import DISABLED, SAME
from .layers.linear import QuantLinear
from .layers.matmul import QuantMatMul, quant_matmul
from .distributed.mx_all_gather import enable_mx_all_gather
from .layers.quant_layer import QuantLayerMixin
from .layers.quant_layers import is_quant_layer, iter_quant_layers
from .recipes import RECIPES, Recipe, recipe

__all__ = ["DISABLED", "SAME", "GemmRounding", "QuantConv1d", "QuantConv2d", "QuantConv3d", "QuantIdentity",
           "is_quant_layer", "iter_quant_layers", "QuantLayerMixin", "QuantLinear", "QuantMatMul", "QuantReLU", "RECIPES", "Recipe", "enable_mx_all_gather",
           "quant_matmul", "quantize_model", "recipe", "remove_functional"]
