"""Which parameters quantization-aware training updates: each parameter of the model belongs to one
part, and the parts chosen train while every other parameter stays frozen.

Parts (a parameter takes the first that applies, in this order):

=============== ===========================================================================
``head``        the output head's parameters (:func:`groupquant.nn.output_head.output_heads`);
                a head tied to the embedding shares its weight with ``embeddings``
``embeddings``  ``nn.Embedding`` weights
``scales``      learned scales (``LearnedScale.learned_scale``: quantizers with ``LearnedScaling``)
``rotations``   parameters of a module whose class name holds "Rotation" (groupquant's own
                Hadamard rotations have none: they are fixed)
``norms``       parameters of a module whose class name holds "Norm" (LayerNorm, RMSNorm, ...)
``weights``     weights and biases of linear / convolution layers, quantized or not
``other``       anything else
=============== ===========================================================================

:data:`DEFAULT_PARTS` (``train=None``) trains weights, norms and whatever scales and rotations the
model has; embeddings and the head stay frozen. Naming a part the model lacks (``scales`` with a
recipe whose scales come from each tensor) is a ValueError that says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Tuple

from torch import nn

from ...core import LearnedScale
from ...inject import did_you_mean
from ...nn.output_head import output_heads
from ...nn.layers.quant_layers import is_quant_layer

__all__ = ["PARTS", "DEFAULT_PARTS", "Trainable", "parameter_parts", "select_trainable", "frozen_except"]

#: Every part name, in the order a parameter is classified.
PARTS = ("head", "embeddings", "scales", "rotations", "norms", "weights", "other")
#: ``train=None``: what trains by default (``scales`` / ``rotations`` only where the model has them).
DEFAULT_PARTS = ("weights", "norms", "scales", "rotations")

_WHY_MISSING = {
    "scales": "the model has no learned scales: its quantizers compute their scales from each tensor (the "
              "recipes' MX / NVFP4 quantizers); use quantizers with groupquant.quantizers.LearnedScaling to train scales",
    "rotations": "the model has no rotation parameters (groupquant's Hadamard rotations are fixed, not parameters)",
}


@dataclass(frozen=True)
class Trainable:
    """The parameters chosen to train, by part: ``part -> ((name, parameter), ...)``."""

    parts: Dict[str, Tuple[Tuple[str, nn.Parameter], ...]]

    def named(self) -> Iterator[Tuple[str, nn.Parameter]]:
        """Every chosen ``(name, parameter)``, parts in :data:`PARTS` order."""
        for part in PARTS:
            yield from self.parts.get(part, ())

    def parameters(self) -> List[nn.Parameter]:
        return [p for _, p in self.named()]

    def count(self) -> int:
        """Number of trainable elements."""
        return sum(p.numel() for p in self.parameters())


def _part_of(module: nn.Module, name: str, heads: Dict[int, str]) -> str:
    """The part of parameter ``name`` held directly by ``module`` (module doc's table)."""
    kind = type(module).__name__.lower()
    if id(module) in heads:
        return "head"
    if isinstance(module, nn.Embedding):
        return "embeddings"
    if isinstance(module, LearnedScale):
        return "scales"
    if "rotation" in kind:
        return "rotations"
    if "norm" in kind:
        return "norms"
    if name in ("weight", "bias") and (is_quant_layer(module) or isinstance(module, (nn.Linear, nn.Conv1d,
                                                                                                 nn.Conv2d, nn.Conv3d))):
        return "weights"
    return "other"


def parameter_parts(model: nn.Module) -> Dict[str, List[Tuple[str, nn.Parameter]]]:
    """``part -> [(full name, parameter), ...]`` for every parameter of ``model`` (each once; a
    parameter held by two modules, a tied head, goes to the first part in :data:`PARTS` order)."""
    heads = output_heads(model)
    found: Dict[int, Tuple[str, str, nn.Parameter]] = {}
    for module_name, module in model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            part = _part_of(module, name, heads)
            full = f"{module_name}.{name}" if module_name else name
            held = found.get(id(param))
            if held is None or PARTS.index(part) < PARTS.index(held[0]):
                found[id(param)] = (part, held[1] if held else full, param)
    out: Dict[str, List[Tuple[str, nn.Parameter]]] = {part: [] for part in PARTS}
    for part, full, param in found.values():
        out[part].append((full, param))
    return out


def _check_parts(train: Any) -> Tuple[Tuple[str, ...], bool]:
    """``train`` as a tuple of part names, and whether the user named them (None: the defaults)."""
    if train is None:
        return DEFAULT_PARTS, False
    names = (train,) if isinstance(train, str) else train
    try:
        names = tuple(names)
    except TypeError:
        raise TypeError(f"qat(train=...) takes None, a part name or a list of them ({', '.join(PARTS)}), "
                        f"got {train!r}") from None
    for name in names:
        if name not in PARTS:
            raise ValueError(f"qat(train=...): unknown part {name!r}{did_you_mean(str(name), PARTS)}; parts: "
                             f"{', '.join(PARTS)}")
    if not names:
        raise ValueError("qat(train=...) is empty: name at least one part to train")
    return names, True


def select_trainable(model: nn.Module, train: Any = None) -> Trainable:
    """The parameters of ``model`` that ``train`` (None: :data:`DEFAULT_PARTS`) chooses. A part
    named explicitly that the model lacks is a ValueError (:data:`_WHY_MISSING` says why);
    nothing to train at all is a ValueError too."""
    names, explicit = _check_parts(train)
    parts = parameter_parts(model)
    chosen: Dict[str, Tuple[Tuple[str, nn.Parameter], ...]] = {}
    for name in names:
        if not parts[name]:
            if explicit:
                raise ValueError(f"qat(train=...) names {name!r}, but "
                                 f"{_WHY_MISSING.get(name, f'the model has no parameters of that part')}")
            continue
        chosen[name] = tuple(parts[name])
    result = Trainable(chosen)
    if not result.parameters():
        raise ValueError(f"qat(train={list(names)}): the model has no parameters in those parts")
    return result


class frozen_except:
    """Context manager: only ``trainable``'s parameters require grad inside; every parameter's
    ``requires_grad`` is given back on exit."""

    def __init__(self, model: nn.Module, trainable: Trainable) -> None:
        self.params = list({id(p): p for p in model.parameters()}.values())
        self.trainable = {id(p) for p in trainable.parameters()}
        self.saved: List[bool] = []

    def __enter__(self) -> "frozen_except":
        self.saved = [p.requires_grad for p in self.params]
        for p in self.params:
            p.requires_grad_(id(p) in self.trainable)
        return self

    def __exit__(self, *exc: Any) -> None:
        for p, flag in zip(self.params, self.saved):
            p.requires_grad_(flag)
