"""The backward quantizer slots of a GEMM layer, their keyword prefixes, defaults and dims.

A layer with a weight runs three GEMMs; next to ``input_quant`` / ``weight_quant`` it takes

==================================== ====================== =========================== ==============
slot                                 keyword prefix         operand (grouped along)     default
==================================== ====================== =========================== ==============
``grad_output_quant``                ``grad_output_``       dY in dX = dY W (out)       None (float)
``weight_quant_for_grad_input``      ``weight_for_grad_``   W in dX = dY W (out)        ``weight_quant``
                                     ``input_``
``grad_output_quant_for_grad_weight`` ``grad_output_for_``  dY in dW = dY^T x (tokens)  ``grad_output_quant``
                                     ``grad_weight_``
``input_quant_for_grad_weight``      ``input_for_grad_``    x in dW = dY^T x (tokens)   ``input_quant``
                                     ``weight_``
==================================== ====================== =========================== ==============

A default (:data:`SAME`) is the other slot's quantizer with that slot's keywords applied;
:data:`DISABLED` keeps the operand of that GEMM in high precision (torchao's DISABLED). Backward
quantization is on when any of the four is given (``quantize_backprop=None``), or as
``quantize_backprop`` says (microxcaling's switch): off, the backward is the straight-through
estimator of the forward quantizers (today's QAT). A quantizer whose ``group_dim`` is set to a
dim other than the one its GEMM reduces over is an error naming the setting.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from ..inject import ConfigError
from ..proxy import QuantProxy, resolve_quantizer
from ..quantizers import quantizer_spec
from .backward_gemm import BackwardOperands

__all__ = ["SAME", "DISABLED", "GradSlot", "LINEAR_GRAD_SLOTS", "MATMUL_GRAD_SLOTS", "GRAD_SLOTS", "GRAD_PREFIXES",
           "grad_slot_prefixes", "build_backward_operands", "backward_operands", "backprop_enabled", "check_grad_slot"]


class _Marker:
    def __init__(self, name: str, doc: str) -> None:
        self.name, self.__doc__ = name, doc

    def __repr__(self) -> str:
        return f"groupquant.nn.{self.name}"

    def __reduce__(self) -> str:
        return self.name


#: A per-GEMM slot left to its default: the forward (or grad_output) quantizer.
SAME: Any = _Marker("SAME", "the slot takes the quantizer of the slot it defaults to")
#: Keep this operand of this GEMM in high precision.
DISABLED: Any = _Marker("DISABLED", "this operand of this GEMM stays in high precision")

@dataclass(frozen=True)
class GradSlot:
    """One backward slot: its keyword, keyword prefix, the slot it defaults to, and its role in
    :class:`BackwardOperands` (``grad_output``, ``b_for_grad_a``, ``grad_output_for_grad_b``,
    ``a_for_grad_b``)."""

    name: str
    prefix: str
    default_of: Optional[str]
    role: str


#: The backward slots of layers with a weight (A = the input, B = the weight).
LINEAR_GRAD_SLOTS = (
    GradSlot("grad_output_quant", "grad_output_", None, "grad_output"),
    GradSlot("weight_quant_for_grad_input", "weight_for_grad_input_", "weight_quant", "b_for_grad_a"),
    GradSlot("grad_output_quant_for_grad_weight", "grad_output_for_grad_weight_", "grad_output_quant",
             "grad_output_for_grad_b"),
    GradSlot("input_quant_for_grad_weight", "input_for_grad_weight_", "input_quant", "a_for_grad_b"),
)
#: The backward slots of QuantMatMul (``a @ b``).
MATMUL_GRAD_SLOTS = (
    GradSlot("grad_output_quant", "grad_output_", None, "grad_output"),
    GradSlot("b_quant_for_grad_a", "b_for_grad_a_", "b_quant", "b_for_grad_a"),
    GradSlot("grad_output_quant_for_grad_b", "grad_output_for_grad_b_", "grad_output_quant", "grad_output_for_grad_b"),
    GradSlot("a_quant_for_grad_b", "a_for_grad_b_", "a_quant", "a_for_grad_b"),
)
#: Backward slot of a weight layer -> (keyword prefix, the slot it defaults to or None).
GRAD_SLOTS: Dict[str, Tuple[str, Optional[str]]] = {s.name: (s.prefix, s.default_of) for s in LINEAR_GRAD_SLOTS}
GRAD_PREFIXES = tuple(prefix for prefix, _ in GRAD_SLOTS.values())


def grad_slot_prefixes(slots: Mapping[str, Any], table: Tuple[GradSlot, ...] = LINEAR_GRAD_SLOTS) -> Dict[str, Any]:
    """Keyword prefix -> the quantizer given for that backward slot (for keyword routing)."""
    return {s.prefix: (None if slots.get(s.name) in (SAME, DISABLED) else slots.get(s.name)) for s in table}


def backprop_enabled(slots: Mapping[str, Any], quantize_backprop: Optional[bool], context: str) -> bool:
    """Whether the backward GEMMs quantize: ``quantize_backprop``, or (None) whether a slot was given."""
    if quantize_backprop is not None and not isinstance(quantize_backprop, bool):
        raise TypeError(f"{context}: quantize_backprop must be True, False or None, got {quantize_backprop!r}")
    if quantize_backprop is not None:
        return quantize_backprop
    return any(given is not SAME and given is not None for name, given in slots.items()
               if name != "grad_output_quant") or slots.get("grad_output_quant") is not None


def check_grad_slot(name: str, given: Any, context: str) -> None:
    """TypeError unless ``given`` is a quantizer class, None, SAME or DISABLED."""
    if given is SAME or given is DISABLED or given is None:
        return
    if not isinstance(given, type):
        raise TypeError(f"{context}: {name} must be a quantizer class, None, groupquant.nn.SAME or "
                        f"groupquant.nn.DISABLED, got {given!r}")


def _slot_proxy(quant: Optional[type], name: str, prefix: str, dims: Tuple[int, int], keywords: Mapping[str, Any],
                context: str) -> Optional[QuantProxy]:
    """The proxy of one backward operand: ``quant`` with its keywords, grouped along ``dims[0]``
    (channel dim ``dims[1]``) of the 2-D (or conv) operand; an explicit other group dim is an error."""
    quantizer = resolve_quantizer(quant, keywords, context, prefix)
    if quantizer is None:
        return None
    spec = quantizer_spec(quantizer)
    if spec.granularity == "group" and spec.group_dim is not None and spec.group_dim != dims[0]:
        raise ConfigError(prefix + "group_dim", f"{context}: {name} groups along dim {spec.group_dim}, but its GEMM "
                                                f"reduces over dim {dims[0]} of that operand; leave group_dim None")
    if spec.scale_source != "stats":
        raise ConfigError(prefix + "scaling_source", f"{context}: {name} must compute its scales from each tensor "
                                                     f"(ScalingSource.STATS), got {spec.scale_source!r}")
    proxy = QuantProxy(quantizer, None, context, dims)
    proxy.prefix = prefix
    return proxy


def build_backward_operands(slots: Mapping[str, Any], forward: Mapping[str, Optional[type]],
                            routed: Mapping[str, Mapping[str, Any]], dims: Mapping[str, Tuple[int, int]],
                            context: str, table: Tuple[GradSlot, ...] = LINEAR_GRAD_SLOTS
                            ) -> Dict[str, Optional[QuantProxy]]:
    """The four backward proxies of a layer, by slot name.

    ``slots``: slot name -> what the caller gave; ``forward``: the forward quantizers with their
    keywords applied (``weight_quant`` / ``input_quant``, or ``a_quant`` / ``b_quant``); ``routed``:
    keywords by prefix; ``dims``: slot name -> (group dim, channel dim) of its operand. A
    :data:`SAME` slot takes the quantizer of the slot it defaults to, keywords included, and applies
    its own keywords on top."""
    resolved: Dict[str, Optional[type]] = dict(forward)
    proxies: Dict[str, Optional[QuantProxy]] = {}
    for slot in table:
        given = slots.get(slot.name, SAME if slot.default_of else None)
        check_grad_slot(slot.name, given, context)
        if given is SAME:
            given = resolved.get(slot.default_of) if slot.default_of else None
        quant = None if given is DISABLED else given
        proxies[slot.name] = _slot_proxy(quant, slot.name, slot.prefix, dims[slot.name], routed.get(slot.prefix, {}),
                                         context)
        resolved[slot.name] = None if proxies[slot.name] is None else proxies[slot.name].quantizer
    return proxies


def backward_operands(proxies: Mapping[str, Optional[QuantProxy]],
                      table: Tuple[GradSlot, ...] = LINEAR_GRAD_SLOTS) -> BackwardOperands:
    """The record the backward GEMMs read, from the proxies by slot name."""
    return BackwardOperands(**{slot.role: proxies[slot.name] for slot in table})
