"""The backward quantizer slots of a GEMM, in one table: names, keyword prefixes, defaults, dims.

A GEMM ``C = A @ B`` runs two more in backward; beside the forward quantizers of A and B it takes

=========================  ================================  ==================================  =============
role (BackwardOperands)    slot (A = input, B = weight)       operand (grouped along)            default
=========================  ================================  ==================================  =============
``grad_output``            ``grad_output_quant``              dC in dA = dC B^T (N)              None (float)
``b_for_grad_a``           ``weight_quant_for_grad_input``    B in dA = dC B^T (N)               B's quantizer
``grad_output_for_grad_b`` ``grad_output_quant_for_grad_weight`` dC in dB = A^T dC (M: tokens)    ``grad_output_quant``
``a_for_grad_b``           ``input_quant_for_grad_weight``    A in dB = A^T dC (M: tokens)       A's quantizer
=========================  ================================  ==================================  =============

Everything else is derived from :data:`GRAD_ROLES`: the slot names and keyword prefixes of a
layer with a weight (A = ``input``, B = ``weight``: ``weight_quant_for_grad_input``,
``weight_for_grad_input_...``) and of :class:`~groupquant.nn.QuantMatMul` (A = ``a``, B = ``b``:
``b_quant_for_grad_a``), the (group, channel) dims of each operand for a layer's 2-D / conv
tensors and for matmul's ``[..., M, K]`` operands, the recipe fields (:mod:`.recipes`), the keywords
only GEMM layers take (:mod:`groupquant.nn.layers.keywords`) and the matmul slots a recipe fills in functional mode
(:func:`matmul_slots`).

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

from ...inject import ConfigError
from ...proxy import QuantProxy, resolve_quantizer
from ...quantizers import quantizer_spec
from .backward_gemm import BackwardOperands

__all__ = ["SAME", "DISABLED", "GradRole", "GRAD_ROLES", "GradSlot", "LINEAR_GRAD_SLOTS", "MATMUL_GRAD_SLOTS",
           "GRAD_SLOTS", "GRAD_PREFIXES", "GEMM_ONLY_KEYWORDS", "grad_slot_prefixes", "build_backward_operands",
           "backward_operands", "backprop_enabled", "check_grad_slot", "matmul_slots"]


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
class GradRole:
    """One backward operand, for every GEMM. ``slot`` / ``prefix`` / ``default_of``: templates of
    the slot name, its keyword prefix and the slot it defaults to, in the operand names ``{a}`` /
    ``{b}``; ``layer_dims`` / ``matmul_dims``: (group dim, channel dim) of the operand in a
    layer's backward (2-D ``tokens x features`` views, conv ``(batch, channels, ...)`` tensors,
    ``W`` along its dim 0) and in matmul's; ``from_layer_slot``: the layer slot whose quantizer
    fills this role of an activation x activation matmul in functional mode (its operands are
    activations, so the input's backward quantizer, never the weight's)."""

    role: str
    slot: str
    prefix: str
    default_of: Optional[str]
    layer_dims: Tuple[int, int]
    matmul_dims: Tuple[int, int]
    from_layer_slot: str


#: The one table of backward operands.
GRAD_ROLES = (
    GradRole("grad_output", "grad_output_quant", "grad_output_", None, (1, 0), (-1, -2), "grad_output_quant"),
    GradRole("b_for_grad_a", "{b}_quant_for_grad_{a}", "{b}_for_grad_{a}_", "{b}_quant", (0, 1), (-1, -2),
             "input_quant_for_grad_weight"),
    GradRole("grad_output_for_grad_b", "grad_output_quant_for_grad_{b}", "grad_output_for_grad_{b}_",
             "grad_output_quant", (0, 1), (-2, -1), "grad_output_quant_for_grad_weight"),
    GradRole("a_for_grad_b", "{a}_quant_for_grad_{b}", "{a}_for_grad_{b}_", "{a}_quant", (0, 1), (-2, -1),
             "input_quant_for_grad_weight"),
)


@dataclass(frozen=True)
class GradSlot:
    """One backward slot of one kind of GEMM: its keyword, keyword prefix, the slot it defaults
    to, its role in :class:`BackwardOperands` and the (group, channel) dims of its operand."""

    name: str
    prefix: str
    default_of: Optional[str]
    role: str
    dims: Tuple[int, int]


def _slots(a: str, b: str, matmul: bool) -> Tuple[GradSlot, ...]:
    """The slots of a GEMM whose operands are named ``a`` and ``b``, from :data:`GRAD_ROLES`."""
    def fill(template: Optional[str]) -> Optional[str]:
        return None if template is None else template.format(a=a, b=b)
    return tuple(GradSlot(fill(r.slot), fill(r.prefix), fill(r.default_of), r.role,  # type: ignore[arg-type]
                          r.matmul_dims if matmul else r.layer_dims) for r in GRAD_ROLES)


#: The backward slots of layers with a weight (A = the input, B = the weight).
LINEAR_GRAD_SLOTS = _slots("input", "weight", matmul=False)
#: The backward slots of QuantMatMul (``a @ b``).
MATMUL_GRAD_SLOTS = _slots("a", "b", matmul=True)
#: Backward slot of a weight layer -> (keyword prefix, the slot it defaults to or None).
GRAD_SLOTS: Dict[str, Tuple[str, Optional[str]]] = {s.name: (s.prefix, s.default_of) for s in LINEAR_GRAD_SLOTS}
GRAD_PREFIXES = tuple(prefix for prefix, _ in GRAD_SLOTS.values())
#: Keywords (and keyword prefixes) of a weight layer's backward slots, which layers without a GEMM refuse.
GEMM_ONLY_KEYWORDS = GRAD_PREFIXES + tuple(GRAD_SLOTS) + ("quantize_backprop", "gemm_rounding", "grad_weight_groups")


def matmul_slots(layer_slots: Mapping[str, Any]) -> Dict[str, Any]:
    """The backward slots of an activation x activation matmul, from a layer's (a recipe's):
    ``grad_output_quant`` always, each other role from its :attr:`GradRole.from_layer_slot`
    where that is not :data:`SAME`."""
    out: Dict[str, Any] = {}
    for role, slot in zip(GRAD_ROLES, MATMUL_GRAD_SLOTS):
        given = layer_slots.get(role.from_layer_slot, SAME if slot.default_of else None)
        if slot.default_of is None or given is not SAME:
            out[slot.name] = given
    return out


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
                            routed: Mapping[str, Mapping[str, Any]], context: str,
                            table: Tuple[GradSlot, ...] = LINEAR_GRAD_SLOTS) -> Dict[str, Optional[QuantProxy]]:
    """The four backward proxies of a layer, by slot name.

    ``slots``: slot name -> what the caller gave; ``forward``: the forward quantizers with their
    keywords applied (``weight_quant`` / ``input_quant``, or ``a_quant`` / ``b_quant``); ``routed``:
    keywords by prefix. A :data:`SAME` slot takes the quantizer of the slot it defaults to,
    keywords included, and applies its own keywords on top; each operand groups along its
    slot's dims."""
    resolved: Dict[str, Optional[type]] = dict(forward)
    proxies: Dict[str, Optional[QuantProxy]] = {}
    for slot in table:
        given = slots.get(slot.name, SAME if slot.default_of else None)
        check_grad_slot(slot.name, given, context)
        if given is SAME:
            given = resolved.get(slot.default_of) if slot.default_of else None
        quant = None if given is DISABLED else given
        proxies[slot.name] = _slot_proxy(quant, slot.name, slot.prefix, slot.dims, routed.get(slot.prefix, {}),
                                         context)
        resolved[slot.name] = None if proxies[slot.name] is None else proxies[slot.name].quantizer
    return proxies


def backward_operands(proxies: Mapping[str, Optional[QuantProxy]],
                      table: Tuple[GradSlot, ...] = LINEAR_GRAD_SLOTS) -> BackwardOperands:
    """The record the backward GEMMs read, from the proxies by slot name."""
    return BackwardOperands(**{slot.role: proxies[slot.name] for slot in table})
