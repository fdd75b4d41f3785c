"""quantize_model: replace nn.Linear / nn.Conv1d / nn.Conv2d in an existing model, keeping weights."""
from __future__ import annotations

import fnmatch
from typing import Any, Callable, Dict, Iterable, List, Optional, Type, Union

from torch import nn

from .conv import QuantConv1d, QuantConv2d
from .linear import QuantLinear

__all__ = ["quantize_model", "REPLACEMENTS"]

#: Exact float type -> its quant layer (subclasses are left alone, e.g. attention's out_proj).
REPLACEMENTS: Dict[Type[nn.Module], Type[nn.Module]] = {
    nn.Linear: QuantLinear, nn.Conv1d: QuantConv1d, nn.Conv2d: QuantConv2d,
}

Patterns = Union[None, str, Iterable[str]]


def _patterns(given: Patterns, argument: str) -> Optional[List[str]]:
    """``given`` as a list of fnmatch patterns (None stays None)."""
    if given is None:
        return None
    if isinstance(given, str):
        return [given]
    patterns = list(given)
    if not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"{argument} must be a module-name pattern or a list of them, got {given!r}")
    return patterns


def _check_matches(patterns: Optional[List[str]], names: List[str], argument: str) -> None:
    """Each pattern must match some replaceable layer: a typo would silently quantize too much or too little."""
    for pattern in patterns or ():
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
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
    new.train(old.training)
    return new


def quantize_model(model: nn.Module, weight_quant: Optional[type] = None, input_quant: Optional[type] = None,
                   output_quant: Optional[type] = None, bias_quant: Optional[type] = None, *,
                   include: Patterns = None, exclude: Patterns = None,
                   filter_fn: Optional[Callable[[str, nn.Module], bool]] = None, **quant_kwargs: Any) -> nn.Module:
    """Replace every ``nn.Linear``, ``nn.Conv1d`` and ``nn.Conv2d`` of ``model`` (in place) by its
    quant layer with the given quantizers and prefixed keywords (``weight_bit_width=4``), keeping
    the weight and bias parameters themselves (so optimizers and tied weights keep working).

    Args:
        include: module-name patterns (``fnmatch``, e.g. ``"encoder.*"``) to convert; None: all.
        exclude: patterns to leave in float (e.g. the classifier ``"head"``).
        filter_fn: ``(name, module) -> bool``, a further filter.
    Every include / exclude pattern must match some layer (a ValueError lists the names).
    Returns the model (or the new layer when ``model`` itself is a Linear/Conv).
    """
    include_p, exclude_p = _patterns(include, "include"), _patterns(exclude, "exclude")
    candidates = [(name, m) for name, m in model.named_modules() if type(m) in REPLACEMENTS]
    names = [name for name, _ in candidates]
    _check_matches(include_p, names, "include")
    _check_matches(exclude_p, names, "exclude")
    quant_args = dict(weight_quant=weight_quant, input_quant=input_quant, output_quant=output_quant,
                      bias_quant=bias_quant, **quant_kwargs)
    for name, module in candidates:
        if include_p is not None and not any(fnmatch.fnmatchcase(name, p) for p in include_p):
            continue
        if exclude_p is not None and any(fnmatch.fnmatchcase(name, p) for p in exclude_p):
            continue
        if filter_fn is not None and not filter_fn(name, module):
            continue
        new = _rebuild(module, REPLACEMENTS[type(module)], quant_args)
        if name == "":
            return new
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, new)
    return model
