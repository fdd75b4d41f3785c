"""microxcaling-compatible entry: a microxcaling program runs after one edit, ``from mx import ...`` ->
``from groupquant.compat.microxcaling import ...``, with microxcaling's names, signatures and numerics, on
groupquant's ops (no autograd of its own). User guide, with what runs where: ``docs/compat-microxcaling.md``.
"""
from . import gemm, mx_mapping, quantize, recipe, specs, vector_ops
from .gemm import *  # noqa: F401,F403 (each module's __all__ is its share of microxcaling's names)
from .quantize import *  # noqa: F401,F403
from .recipe import *  # noqa: F401,F403
from .specs import *  # noqa: F401,F403
from .vector_ops import *  # noqa: F401,F403

__all__ = ["mx_mapping", *gemm.__all__, *quantize.__all__, *recipe.__all__, *specs.__all__, *vector_ops.__all__]
