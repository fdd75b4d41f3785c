"""QuantSpec: everything that fixes how one tensor is quantized, as one frozen, hashable record.

A quantizer class (:mod:`groupquant.quantizers`) resolves its settings once into a ``QuantSpec``;
proxies, the core modules, kernel dispatch, packing and export read that record and nothing else.
Modes are the lower-level names the ops use (the quantizer enums are ``str`` enums with these
values): ``restrict`` in ``fp`` / ``power_of_two``; ``scale_rounding`` in ``floor`` / ``ceil`` /
``even`` / ``rceil`` / ``float_log2``; ``scale_source`` in ``stats`` / ``running_stats`` / ``learned``;
``stats_op`` in ``abs_max`` / ``percentile`` / ``mse``; ``rounding`` in ``even`` / ``nearest`` /
``floor`` / ``stochastic``; ``ste`` in ``identity`` / ``clipped``.

Dims: ``group_dim`` / ``channel_dim`` None mean "the dim the layer gives this operand" (a weight's
input dim, an activation's feature or channel dim, the reduction dim of the GEMM the operand
enters); :meth:`QuantSpec.with_dims` fills them in. Used on its own (no layer), None groups along
the last dim and scales channels along dim 0.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Optional

from ..formats import QUANTIZER_SETTINGS, ElementFormat, ScaleFormat, check_scale_setup
from ..ops import ROUNDING_MODES, STE_MODES, OpSettings
from .granularity import ScaleGranularity

__all__ = ["QuantSpec", "STANDALONE_GROUP_DIM", "STANDALONE_CHANNEL_DIM"]

#: Dims a spec without layer dims uses when applied to a tensor directly.
STANDALONE_GROUP_DIM = -1
STANDALONE_CHANNEL_DIM = 0


@dataclass(frozen=True)
class QuantSpec:
    """One quantizer, resolved. Fields:

    name: the quantizer's name (variants made by ``let`` or layer keywords say what differs).
    fmt: the element format object (:class:`groupquant.formats.IntFormat` / ``FloatFormat``).
    granularity: ``tensor``, ``channel`` or ``group`` scale sharing.
    group_size: elements per group (``group`` only); group_dim / channel_dim: see module doc.
    restrict, scale_rounding: float scales (``fp``: amax / max_normal) or powers of two chosen by
        the rule ``scale_rounding`` (``floor`` is OCP MX v1.0).
    scale_source, stats_op, percentile, running_momentum, scaling_min_val, mse_window: where the
        scale comes from (see :func:`groupquant.core.build_tensor_quant`).
    rounding: element rounding; saturating: clamp to +-max normal (False: Inf/NaN by the format's
        rule); ste: gradient of the rounding.
    element_precision: None, or an ``ElementPrecision`` (bfloat16, fp16, ExMy) the tensor is
        rounded to, unscaled, before it is quantized (microxcaling's ``bfloat`` operands).
    scale_format: the scale's number format (:mod:`groupquant.formats.scale`); None picks E8M0
        for power-of-two scales and float32 for ``fp``. tensor_scale: a per-tensor float32 second
        scale (two-level scaling, NVFP4; minifloat scale formats, abs-max scales from each tensor).
    """

    name: str
    fmt: ElementFormat
    granularity: str = "group"
    group_size: Optional[int] = 32
    group_dim: Optional[int] = None
    channel_dim: Optional[int] = None
    restrict: str = "power_of_two"
    scale_rounding: str = "floor"
    scale_source: str = "stats"
    stats_op: str = "abs_max"
    percentile: float = 99.999
    running_momentum: float = 0.1
    scaling_min_val: float = 2.0 ** -32
    mse_window: int = 3
    rounding: str = "even"
    saturating: bool = True
    ste: str = "identity"
    element_precision: Optional[Any] = None  # an ElementPrecision: x is rounded to it first
    scale_format: Optional[ScaleFormat] = None
    tensor_scale: bool = False

    def __post_init__(self) -> None:
        """Refuse a mode no module implements. The scale set-up goes through
        :func:`groupquant.formats.check_scale_setup`, the one rule of it (a quantizer's settings
        were checked by it when resolved, naming the setting; here it guards records built by
        hand), which also fills in the scale format the rule implies. Nothing below re-checks it:
        :meth:`op_settings` hands the checked values to the ops."""
        allowed = {"granularity": ("tensor", "channel", "group"), "restrict": ("fp", "power_of_two"),
                   "scale_rounding": ("floor", "ceil", "even", "rceil", "float_log2"),
                   "scale_source": ("stats", "running_stats", "learned"), "stats_op": ("abs_max", "percentile", "mse"),
                   "rounding": ROUNDING_MODES, "ste": STE_MODES}
        for name, choices in allowed.items():
            if getattr(self, name) not in choices:
                raise ValueError(f"QuantSpec {name} must be one of {choices}, got {getattr(self, name)!r}")
        sf, _rule, _ts = check_scale_setup(self.scale_format, self.scale_rule, restrict=self.restrict,
                                           tensor_scale=self.tensor_scale, source=self.scale_source,
                                           statistic=self.stats_op, granularity=self.granularity,
                                           names=QUANTIZER_SETTINGS)
        object.__setattr__(self, "scale_format", sf)
        size = self.group_size
        if self.granularity == "group" and size is not None and (isinstance(size, bool) or not isinstance(size, int)
                                                                 or size < 1):
            raise ValueError(f"QuantSpec group_size must be a positive int (or None: the whole dim), got {size!r}")
        if self.scale_source == "running_stats" and self.granularity != "tensor":
            raise ValueError(f"QuantSpec running_stats scales are per tensor, got per {self.granularity}")
        try:  # (group_size None is resolved by the caller before use: then the property raises)
            object.__setattr__(self, "_scale_granularity", self._granularity_record())
        except ValueError:
            object.__setattr__(self, "_scale_granularity", None)

    @property
    def scale_rule(self) -> str:
        """The scale rule the ops apply (:attr:`groupquant.ops.OpSettings.scale_rule`): ``float``
        for fp scales, else the power-of-two rule ``scale_rounding``."""
        return "float" if self.restrict == "fp" else self.scale_rounding

    @property
    def scale_mode(self) -> str:
        """:attr:`scale_rule` under the functional ops' keyword name (kept for callers of that name)."""
        return self.scale_rule

    def op_settings(self, ndim: int) -> OpSettings:
        """The op settings of this quantizer for a tensor of ``ndim`` dims: the one translation of a
        resolved spec into what :func:`groupquant.fake_quant` / :func:`groupquant.quantize` take
        (block and dim from :meth:`ScaleGranularity.op_block`: a group granularity as is, per tensor
        and per channel on dynamic quantization's 2-D view). No second check: the spec was checked
        when it was built."""
        block, dim = self.scale_granularity.op_block(ndim)
        return OpSettings(fmt=self.fmt, block_size=block, dim=dim, rounding=self.rounding, scale_rule=self.scale_rule,
                          saturating=self.saturating, scale_format=self.scale_format, tensor_scale=self.tensor_scale)

    @property
    def is_group(self) -> bool:
        return self.granularity == "group"

    @property
    def is_dynamic(self) -> bool:
        """Abs-max scales from each tensor, one fused kernel pass (the MX path)."""
        return self.scale_source == "stats" and self.stats_op == "abs_max"

    def with_dims(self, group_dim: Optional[int], channel_dim: Optional[int], *,
                  force: bool = False) -> "QuantSpec":
        """This spec with the layer's dims filled in where the quantizer left them None
        (``force``: replace them whatever the quantizer says, e.g. a 1-D bias). Cached."""
        g = group_dim if force or self.group_dim is None else self.group_dim
        c = channel_dim if force or self.channel_dim is None else self.channel_dim
        if (g, c) == (self.group_dim, self.channel_dim):
            return self
        return _with_dims(self, g, c)

    @property
    def scale_granularity(self) -> ScaleGranularity:
        """The granularity record the layout helpers use (standalone dims where still None).
        Computed once per spec, in ``__post_init__`` (kept beside the fields; not part of equality
        or the hash). Not a ``functools.cached_property``: its lock (Python < 3.12) stops
        ``torch.compile(fullgraph=True)`` on a freshly built layer."""
        record = self.__dict__.get("_scale_granularity")
        if record is None:  # not computable at construction, or unpickled from before the record was kept
            record = self._granularity_record()
            object.__setattr__(self, "_scale_granularity", record)
        return record

    def _granularity_record(self) -> ScaleGranularity:
        """:attr:`scale_granularity`, computed."""
        if self.granularity == "group":
            dim = STANDALONE_GROUP_DIM if self.group_dim is None else self.group_dim
            return ScaleGranularity("group", dim, self.group_size)
        if self.granularity == "channel":
            dim = STANDALONE_CHANNEL_DIM if self.channel_dim is None else self.channel_dim
            return ScaleGranularity("channel", dim)
        return ScaleGranularity("tensor")

    def describe_rule(self) -> str:
        """One line saying how the scale is obtained."""
        stat = self.stats_op
        if self.restrict == "fp":
            rule = f"{stat} / max_normal"
        else:
            rule = {"floor": f"2^(floor(log2({stat})) - emax)", "ceil": f"2^(ceil(log2({stat})) - emax)",
                    "even": f"2^(floor(log2(round_mantissa({stat}))) - emax)",
                    "rceil": f"2^ceil(log2({stat} / max_normal))",
                    "float_log2": f"2^(floor(float_log2({stat})) - emax)"}[self.scale_rounding]
        if stat == "mse":
            rule = (f"the power of two from {self.mse_window} binades below the floor rule's to one above it "
                    "with the least squared error")
        sf = self.scale_format
        if self.tensor_scale:
            rule = f"({rule}) / g, g = max(amax(|x|) / (max_scale * max_normal), 2^-126) per tensor (float32)"
        if self.restrict == "fp":
            kind = "float" if sf.name == "float32" else f"float ({sf.name})"
        else:
            kind = f"power of two ({sf.name.upper()})"
        where = {"stats": "from each tensor", "running_stats": "running statistics",
                 "learned": "learned, initialised as"}[self.scale_source]
        return f"{kind}: {where} {rule}"

    @property
    def uses_default_scale_format(self) -> bool:
        """True for E8M0 power-of-two or float32 scales without a tensor scale (every scale source works)."""
        return not self.tensor_scale and self.scale_format.any_scale_source


@functools.lru_cache(maxsize=1024)
def _with_dims(spec: QuantSpec, group_dim: Optional[int], channel_dim: Optional[int]) -> QuantSpec:
    """``spec`` with these dims (one record per distinct spec and dims)."""
    return dataclasses.replace(spec, group_dim=group_dim, channel_dim=channel_dim)
