"""Element-wise ops in a reduced precision (microxcaling's ``bfloat`` / ``fp`` emulation).

Every basic operation of every op, forward and backward, is rounded to an
:class:`~groupquant.ops.precision.ElementPrecision` (``precision=`` takes one or a name such as
``"bfloat16"``, ``"fp16"``, ``"e5m7"``, ``"bfloat12"``). Each module documents its decomposition.
"""
from ..ops.precision import ElementPrecision, resolve_precision, round_to_precision
from .activations import gelu, leaky_relu, relu, relu6, sigmoid, silu, tanh
from .arithmetic import add, div, mul, split, sub
from .modules import GELU, GroupNorm, LayerNorm, ReLU, RMSNorm, Sigmoid, SiLU, Softmax, Tanh
from .normalization import batch_norm, group_norm, layer_norm, rms_norm
from .reductions import amax, mean, sum
from .rounded_math import RoundedMath, math_for
from .softmax import softmax
from .unary import cast, erf, exp, exp2, log, pow, reciprocal, rsqrt, sqrt

__all__ = [
    "ElementPrecision", "resolve_precision", "round_to_precision", "RoundedMath", "math_for",
    "add", "sub", "mul", "div", "split",
    "exp", "exp2", "log", "sqrt", "rsqrt", "reciprocal", "erf", "pow", "cast", "tanh",
    "sum", "mean", "amax", "softmax", "layer_norm", "rms_norm", "group_norm", "batch_norm",
    "gelu", "silu", "sigmoid", "relu", "relu6", "leaky_relu",
    "GELU", "GroupNorm", "LayerNorm", "ReLU", "RMSNorm", "Sigmoid", "SiLU", "Softmax", "Tanh",
]
