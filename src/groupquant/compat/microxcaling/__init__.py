"""microxcaling-compatible entry: a microxcaling program runs after one edit,
``from mx import ...`` -> ``from groupquant.compat.microxcaling import ...``; the names, signatures
and numerics are microxcaling's (user guide, with what runs where: ``docs/compat-microxcaling.md``).

Underneath, every op is groupquant's: the element-wise ops are :mod:`groupquant.elementwise`'s run
with one rounding kit (:mod:`.vector_ops`), the GEMM layers are quant layers built from the recipe
of :func:`.recipe.recipe_from_mx_specs` (:mod:`.gemm`), MX quantization is
:func:`groupquant.fake_quant` (:mod:`.quantize`); compat has no autograd of its own.
``mx_mapping.inject_pyt_ops`` replaces torch's entries globally, as microxcaling does.
"""
from . import mx_mapping
from .gemm import Conv1d, Conv2d, Conv3d, Linear, bmm, conv1d, conv2d, conv3d, linear, matmul
from .recipe import recipe_from_mx_specs
from .quantize import quantize_bfloat, quantize_elemwise_op, quantize_mx_op
from .specs import (MxSpecs, UnknownMxSpecError, add_mx_args, apply_mx_specs, finalize_mx_specs,
                    get_backwards_mx_specs, get_default_mx_specs, get_mx_specs)
from .vector_ops import (GELU, BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, LayerNorm, LeakyReLU, ReLU, ReLU6,
                         RMSNorm, SiLU, Sigmoid, Softmax, Tanh, batch_norm, gelu, group_norm, layer_norm, leaky_relu,
                         relu, relu6, sigmoid, silu, simd_add, simd_div, simd_exp, simd_log, simd_mul, simd_norm,
                         simd_reduce_mean, simd_reduce_sum, simd_split, simd_sqrt, simd_square, simd_sub, softmax, tanh)

__all__ = [
    "MxSpecs", "UnknownMxSpecError", "add_mx_args", "apply_mx_specs", "finalize_mx_specs", "get_backwards_mx_specs",
    "get_default_mx_specs", "get_mx_specs", "quantize_bfloat", "quantize_elemwise_op", "quantize_mx_op",
    "Linear", "linear", "matmul", "bmm", "Conv1d", "Conv2d", "Conv3d", "conv1d", "conv2d", "conv3d",
    "LayerNorm", "RMSNorm", "layer_norm", "GroupNorm", "group_norm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
    "batch_norm",
    "Softmax", "softmax", "GELU", "ReLU", "ReLU6", "LeakyReLU", "SiLU", "Sigmoid", "Tanh", "gelu", "relu", "relu6",
    "leaky_relu", "sigmoid", "silu", "tanh",
    "simd_add", "simd_sub", "simd_mul", "simd_div", "simd_split", "simd_sqrt", "simd_square", "simd_exp",
    "simd_log", "simd_reduce_sum", "simd_reduce_mean", "simd_norm", "mx_mapping", "recipe_from_mx_specs",
]
