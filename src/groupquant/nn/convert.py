"""quantize_model: replace nn.Linear / nn.Conv1d / nn.Conv2d in an existing model, keeping weights."""
from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

from torch import nn

from .layers.conv import QuantConv1d, QuantConv2d
from .layers.linear import QuantLinear
from .name_patterns import Patterns, as_patterns, matches_any
from .layers.quant_layer import QuantLayerMixin
from .functional.functional_mode import quantize_functional
from .output_head import announce_kept_heads, check_quantize_head, head_kept_float, output_heads
from .recipes import Recipe, recipe as recipe_of

__all__ = ["quantize_model", "remove_functional", "REPLACEMENTS", "unconvertible_weight_layers"]

#: Exact float type -> its quant layer (subclasses are left alone, e.g. attention's out_proj).
REPLACEMENTS: Dict[Type[nn.Module], Type[nn.Module]] = {
    nn.Linear: QuantLinear, nn.Conv1d: QuantConv1d, nn.Conv2d: QuantConv2d,
}

def unconvertible_weight_layers(model: nn.Module) -> Dict[str, int]:
    """``type name -> count`` of the modules holding a weight of 2 or more dims that quantize_model
    does not convert (not exactly nn.Linear / Conv1d / Conv2d, not an embedding): transformers'
    ``Conv1D`` (GPT-2's projections), a Linear subclass, ..."""
    found: Dict[str, int] = {}
    for m in model.modules():
        weight = m._parameters.get("weight")
        if weight is not None and weight.dim() >= 2 and type(m) not in REPLACEMENTS and \
                not isinstance(m, (nn.Embedding, nn.EmbeddingBag, QuantLayerMixin)):
            found[type(m).__name__] = found.get(type(m).__name__, 0) + 1
    return found


def nothing_converted(model: nn.Module, candidates: int, caller: str) -> str:
    """The sentence saying that ``caller`` converted no layer of ``model`` and why."""
    other = unconvertible_weight_layers(model)
    listed = ", ".join(f"{name} x {n}" for name, n in other.items())
    why = (f"include / exclude / filter_fn / quantize_head selected none of its {candidates} Linear / Conv layers"
           if candidates else "it has no nn.Linear / nn.Conv1d / nn.Conv2d layer")
    return (f"{caller}: converted no layer of {type(model).__name__}: {why}"
            + (f"; its other weight layers ({listed}) are not converted (quantize_model converts those exact types "
               "only)" if other else ""))


def _check_matches(patterns: Optional[List[str]], names: List[str], argument: str) -> None:
    """Each pattern must match some replaceable layer: a typo would silently quantize too much or too little."""
    for pattern in patterns or ():
        if not any(matches_any(name, (pattern,)) for name in names):
            raise ValueError(f"{argument} pattern {pattern!r} matches no Linear/Conv1d/Conv2d layer; "
                             f"layer names: {', '.join(names) or '(none)'}")


def _rebuild(old: nn.Module, cls: Type[nn.Module], quant_args: Dict[str, Any]) -> nn.Module:
    """A quant layer with ``old``'s configuration and its very weight/bias parameters."""
    w = old.weight
    common = {"bias": old.bias is not None, "device": w.device, "dtype": w.dtype}
    if isinstance(old, nn.Linear):
        new = cls(old.in_features, old.out_features, **common, **quant_args)
    else:
        new = cls(old.in_channels, old.out_channels, old.kernel_size, old.stride, old.padding, old.dilation,
                  old.groups, padding_mode=old.padding_mode, **common, **quant_args)
    new.weight = old.weight
    new.bias = old.bias
    new.weight_quant.init_learned_scales(new.weight)  # (from the weight it now holds)
    new.train(old.training)
    return new


def _selected(name: str, module: nn.Module, include_p: Optional[List[str]], exclude_p: Optional[List[str]],
              filter_fn: Optional[Callable[[str, nn.Module], bool]]) -> bool:
    """Whether the layer registered under ``name`` is chosen by include / exclude / filter_fn."""
    if include_p is not None and not matches_any(name, include_p):
        return False
    if matches_any(name, exclude_p):
        return False
    return filter_fn is None or bool(filter_fn(name, module))


def _replaceable_slots(model: nn.Module) -> List[Tuple[nn.Module, List[str]]]:
    """Each replaceable layer once, with every name it is registered under (a module registered
    twice, ``model.a = model.b = lin`` or ``Sequential(lin, act, lin)``, has several)."""
    slots: Dict[int, Tuple[nn.Module, List[str]]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        if type(module) in REPLACEMENTS:
            slots.setdefault(id(module), (module, []))[1].append(name)
    return list(slots.values())


def _shared_choice(module: nn.Module, names: List[str], include_p: Optional[List[str]],
                   exclude_p: Optional[List[str]], filter_fn: Optional[Callable[[str, nn.Module], bool]]) -> bool:
    """Whether to convert a layer registered under ``names``: all names must agree, since one
    module cannot be both quantized and float (a ValueError lists the names either way)."""
    chosen = [name for name in names if _selected(name, module, include_p, exclude_p, filter_fn)]
    if chosen and len(chosen) != len(names):
        left = [name for name in names if name not in chosen]
        raise ValueError(f"one {type(module).__name__} is registered under several names "
                         f"({', '.join(names)}) and include / exclude / filter_fn select {', '.join(chosen)} "
                         f"but not {', '.join(left)}; a shared layer is converted as a whole: select all of its "
                         f"names or none")
    return bool(chosen)


def quantize_model(model: nn.Module, weight_quant: Optional[type] = None, input_quant: Optional[type] = None,
                   output_quant: Optional[type] = None, bias_quant: Optional[type] = None, *,
                   include: Patterns = None, exclude: Patterns = None,
                   filter_fn: Optional[Callable[[str, nn.Module], bool]] = None, recipe: Any = None,
                   functional: Optional[bool] = None, quantize_head: Optional[bool] = None,
                   **quant_kwargs: Any) -> nn.Module:
    """Replace every ``nn.Linear``, ``nn.Conv1d`` and ``nn.Conv2d`` of ``model`` (in place) by its
    quant layer with the given quantizers and prefixed keywords (``weight_bit_width=4``), keeping
    the weight and bias parameters themselves (so optimizers and tied weights keep working).

    Args:
        include: module-name patterns (``fnmatch``, e.g. ``"encoder.*"``) to convert; None: all.
        exclude: patterns to leave in float (e.g. the classifier ``"head"``).
        filter_fn: ``(name, module) -> bool``, a further filter.
        recipe: a :class:`groupquant.nn.Recipe` or its name (``"mxfp8"``, ``"mxfp8_e4m3_e5m2"``,
            ... see ``groupquant.nn.RECIPES``): quantizers for every operand of every GEMM, forward
            and backward. Quantizers and slot keywords given here as well override the recipe's.
        functional: also quantize the forward's functional GEMMs (``torch.matmul`` / ``bmm`` / ``@``
            between activations, ``F.scaled_dot_product_attention``, ``F.linear``) by the recipe,
            through a torch function mode entered around ``model``'s forward
            (:mod:`groupquant.nn.functional.functional_mode`). Default: on when the recipe quantizes
            activations (``Recipe.quantizes_activations``); off for a weight-only recipe, whose
            functional GEMMs between activations stay float anyway (pass True to quantize
            ``F.linear`` / ``F.conv*`` weights outside the converted layers; the mode runs every
            torch call of the forward through Python, which slows a packed LLM's decode by ~25%).
            ``groupquant.nn.remove_functional(model)`` takes it off again.
        quantize_head: a language model's output head (``model.get_output_embeddings()``, or a
            layer whose weight is an ``nn.Embedding``'s weight) stays float unless this is True or an
            ``include`` pattern names it; None (default) says so in one line (logger
            ``groupquant.nn.output_head``, and stderr when logging does not show INFO), False keeps it
            float silently (:mod:`groupquant.nn.output_head`).
    Every include / exclude pattern must match some layer (a ValueError lists the names). A layer
    not chosen stays float on every route: with the functional mode on, nothing that runs inside it
    (its own ``F.linear`` included) is quantized by the mode.

    A recipe or at least one quantizer must be given (a ValueError otherwise). A model already
    quantized with a recipe refuses a different one (ValueError naming both: start again from the
    float model); calls with explicit quantizers convert only the layers still float.

    A layer registered under several names (``model.a = model.b = lin``, ``Sequential(lin, act,
    lin)``) stays shared: one quant layer takes every one of its slots. It is converted when all
    of its names are selected, left alone when none is; names that disagree are a ValueError
    (patterns and ``filter_fn`` see every name, so ``exclude="b"`` alone refuses rather than
    guessing).
    Returns the model (or the new layer when ``model`` itself is a Linear/Conv).
    """
    check_quantize_head(quantize_head, "quantize_model")
    r = recipe_of(recipe) if recipe is not None else None
    _check_not_requantized(model, r, functional)
    include_p, exclude_p = as_patterns(include, "include"), as_patterns(exclude, "exclude")
    slots = _replaceable_slots(model)
    names = [name for _, slot_names in slots for name in slot_names]
    _check_matches(include_p, names, "include")
    _check_matches(exclude_p, names, "exclude")
    quant_args = dict(r.layer_kwargs()) if r is not None else {}
    given = dict(weight_quant=weight_quant, input_quant=input_quant, output_quant=output_quant, bias_quant=bias_quant)
    quant_args.update({k: v for k, v in given.items() if v is not None or k not in quant_args})
    quant_args.update(quant_kwargs)
    if r is None and not any(v is not None for k, v in quant_args.items() if _is_quant_slot(k)):
        raise ValueError("quantize_model needs a recipe (recipe='mxfp8', see groupquant.nn.RECIPES) or at least one "
                         "quantizer (weight_quant=..., input_quant=...); without one every layer would be converted "
                         "to a layer that quantizes nothing")
    choices = [(module, slot_names, _shared_choice(module, slot_names, include_p, exclude_p, filter_fn))
               for module, slot_names in slots]
    heads = output_heads(model)
    kept: List[str] = []
    for i, (module, slot_names, chosen) in enumerate(choices):
        note = head_kept_float(module, slot_names, heads, include_p, quantize_head) if chosen else None
        if note is not None:
            kept.append(note)
            choices[i] = (module, slot_names, False)
    if quantize_head is None:
        announce_kept_heads(kept, "quantize_model")
    if not any(chosen for _, _, chosen in choices) and not any(isinstance(m, QuantLayerMixin) for m in model.modules()):
        warnings.warn(nothing_converted(model, len(choices), "quantize_model"), UserWarning, stacklevel=2)
    for module, slot_names, chosen in choices:
        if not chosen:
            continue
        new = _rebuild(module, REPLACEMENTS[type(module)], quant_args)
        for name in slot_names:
            if name == "":
                return new
            parent_name, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent_name), child, new)
    if r is not None:
        model.__dict__["_groupquant_recipe"] = r
    if functional if functional is not None else (r is not None and r.quantizes_activations):
        if r is None:
            raise ValueError("quantize_model(functional=True) needs a recipe: the functional GEMMs take its quantizers")
        remove_functional(model)
        left_float = [module for module, _, chosen in choices if not chosen]
        model._groupquant_functional_handle = quantize_functional(model, r, left_float)
    return model


def _is_quant_slot(keyword: str) -> bool:
    """Whether a quantize_model keyword names a quantizer slot (``weight_quant``, ``grad_output_quant``, ...)."""
    return keyword.endswith("_quant") or "_quant_for_" in keyword


def _check_not_requantized(model: nn.Module, r: Optional[Recipe], functional: Optional[bool]) -> None:
    """A second recipe on a model already quantized with another would mix them (the converted
    layers keep the first, the functional GEMMs would take the second): refuse, naming both. A
    mix by layer (each call ``functional=False``, the later ones converting the layers still float,
    as mixed precision does) involves no functional GEMM and is allowed."""
    previous = model.__dict__.get("_groupquant_recipe") if isinstance(model, nn.Module) else None
    if r is None or previous is None or previous == r:
        return
    if functional is False and "_groupquant_functional_handle" not in model.__dict__:
        return
    raise ValueError(f"quantize_model(recipe={r.name!r}): this model is already quantized with recipe "
                     f"{previous.name!r}; a second recipe would mix the two (the converted layers keep "
                     f"{previous.name!r}, the functional GEMMs would take {r.name!r}). Start again from the float "
                     "model (keep a copy.deepcopy of it before quantize_model), or convert layer by layer with "
                     "functional=False in every call (mixed precision)")


def remove_functional(model: nn.Module) -> bool:
    """Take off the functional quantization :func:`quantize_model` put on ``model``; whether any was on."""
    handle = model.__dict__.pop("_groupquant_functional_handle", None)
    model.__dict__.pop("_groupquant_functional", None)
    if handle is None:
        return False
    handle.remove()
    return True
