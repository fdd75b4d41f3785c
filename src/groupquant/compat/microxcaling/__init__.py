"""microxcaling-compatible entry: a microxcaling program runs after one edit,
``from mx import ...`` -> ``from groupquant.compat.microxcaling import ...`` (user guide:
``docs/compat-microxcaling.md``).

Settings: :class:`MxSpecs` (microxcaling's keys and defaults; unknown keys fail with a
did-you-mean), ``finalize_mx_specs``, ``get_backwards_mx_specs``, ``add_mx_args``, ``get_mx_specs``.
Layers and functions take ``mx_specs=`` and round in microxcaling's order: ``Linear`` / ``linear``,
``matmul``, ``bmm``, ``Conv1d`` / ``Conv2d`` / ``Conv3d`` and their functions, ``LayerNorm``, ``RMSNorm``,
``layer_norm``, ``GroupNorm``, ``BatchNorm1d`` / ``2d`` / ``3d``, ``softmax`` / ``Softmax``, the
activations, the ``simd_*`` ops, ``quantize_bfloat``, ``quantize_mx_op``. ``mx_mapping.inject_pyt_ops``
replaces torch's entries globally (``restore_pyt_ops`` undoes it). ``recipe_from_mx_specs`` turns
the MX settings into a groupquant recipe for the native path (``groupquant.quantize_model``).

Underneath: the element-wise settings (``bfloat`` / ``fp``, ``round``, ``vec_use_recip``,
``vec_use_exp2``, ``quantize_backprop``) become one rounding kit,
:class:`groupquant.elementwise.RoundedMath` (:func:`.mapping.rounding_kit`, with microxcaling's
formulas); softmax, the activations, the norms and the ``simd_*`` ops are
:mod:`groupquant.elementwise`'s ops run with it; ``Linear``, the convolutions and ``matmul`` are
groupquant quant layers built from :func:`.recipe.recipe_from_mx_specs`'s route (:mod:`.gemm`;
roundings around the GEMM: :class:`groupquant.nn.GemmRounding`); MX quantization is
:func:`groupquant.fake_quant`. compat has no autograd of its own.

The MX shared exponent is OCP's exact ``floor(log2(amax))``; microxcaling's float-log2 exponent is
``MxSpecs(shared_exp_from_float_log2=True)``, the scale rule ``float_log2`` (PyTorch reference only).
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
    "LayerNorm", "RMSNorm", "layer_norm", "GroupNorm", "group_norm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "batch_norm",
    "Softmax", "softmax", "GELU", "ReLU", "ReLU6", "LeakyReLU", "SiLU", "Sigmoid", "Tanh", "gelu", "relu", "relu6",
    "leaky_relu", "sigmoid", "silu", "tanh",
    "simd_add", "simd_sub", "simd_mul", "simd_div", "simd_split", "simd_sqrt", "simd_square", "simd_exp",
    "simd_log", "simd_reduce_sum", "simd_reduce_mean", "simd_norm", "mx_mapping", "recipe_from_mx_specs",
]
