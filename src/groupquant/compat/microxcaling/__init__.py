"""microxcaling-compatible entry: a microxcaling program runs after one edit, ``from mx import ...`` ->
``from groupquant.compat.microxcaling import ...``, with microxcaling's names, signatures and numerics, on
groupquant's ops (no autograd of its own). User guide, with what runs where: ``docs/compat-microxcaling.md``.
"""
from . import gemm, mx_mapping, quantize, recipe, specs, vector_ops
from .gemm import Conv1d, Conv2d, Conv3d, Linear, bmm, conv1d, conv2d, conv3d, linear, matmul
from .quantize import quantize_bfloat, quantize_elemwise_op, quantize_mx_op
from .recipe import recipe_from_mx_specs
from .specs import (MxSpecs, UnknownMxSpecError, add_mx_args, apply_mx_specs, finalize_mx_specs,
                    get_backwards_mx_specs, get_default_mx_specs, get_mx_specs)
from .vector_ops import (GELU, BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, LayerNorm, LeakyReLU, ReLU, ReLU6,
                         RMSNorm, SiLU, Sigmoid, Softmax, Tanh, batch_norm, gelu, group_norm, layer_norm, leaky_relu,
                         relu, relu6, sigmoid, silu, simd_add, simd_div, simd_exp, simd_log, simd_mul, simd_norm,
                         simd_reduce_mean, simd_reduce_sum, simd_split, simd_sqrt, simd_square, simd_sub, softmax, tanh)

#: microxcaling's names: each module's ``__all__`` is its share of them.
__all__ = ["mx_mapping", *gemm.__all__, *quantize.__all__, *recipe.__all__, *specs.__all__, *vector_ops.__all__]
