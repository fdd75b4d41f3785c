"""The candidates of :func:`groupquant.calib.auto_precision` and their bit costs.

A candidate is a recipe name, a :class:`groupquant.nn.Recipe`, ``"float"``, or a pair
``(weights, activations)`` of those: the weight quantizer of the first and the input (activation)
quantizer of the second, e.g. ``("mxfp4", "mxfp8")`` is MXFP4 weights with MXFP8 inputs (W4A8).
In a pair, ``"float"`` or a weight-only recipe on the activation side leaves the inputs float, and
``"float"`` on the weight side leaves the weights float. A pair becomes a :class:`Recipe` named
``"w=<weights>,a=<activations>"``: the weight recipe with its ``input_quant`` replaced (the backward
slots are the weight recipe's; calibration does not use them).

Costs (integers, bits):

- :func:`layer_bits`: storage of an ``[out, in]`` weight: elements ``out * in * element_bits``, one
  scale per group (``scale_bits``; 32 per channel for per-channel scales), 32 for a per-tensor
  scale; a float weight costs its dtype's bits.
- :func:`activation_bits`: one token's input row of ``in`` features: ``in * element_bits`` plus
  ``scale_bits`` per group of the row (groups run along the features, as MX inputs' blocks do), 32
  for a per-row scale; a per-tensor scale is shared by every token of a call and not counted. Float
  inputs cost the layer's dtype bits per element.
"""
from __future__ import annotations

from typing import Any, Tuple, Union

import torch

from ..inject import UnknownSettingError
from ..nn.recipes import Recipe
from ..nn.recipes import recipe as recipe_of
from ..quantizers.resolve import quantizer_spec

__all__ = ["FLOAT", "resolve_candidate", "layer_bits", "activation_bits"]

FLOAT = "float"

Candidate = Union[str, Recipe]


def _name(given: Any) -> str:
    return FLOAT if given == FLOAT else recipe_of(given).name


def _named(err: Exception, where: str) -> Exception:
    """``err`` with ``where`` in front; an unknown recipe stays an UnknownSettingError (its did-you-mean kept)."""
    if isinstance(err, UnknownSettingError):
        return UnknownSettingError("candidates", f"{where}: {err.problem}", err.suggestion)
    return ValueError(f"{where}: {err}")


def resolve_candidate(given: Any, where: str) -> Tuple[str, Candidate]:
    """``(label, candidate)`` of one candidate as given (module doc): the candidate is ``"float"`` or
    a :class:`Recipe`. ``where`` (e.g. ``"auto_precision: candidates[2]"``) starts every error."""
    if isinstance(given, (tuple, list)):
        if len(given) != 2:
            raise ValueError(f"{where}: a pair must be (weights, activations), two recipe names or 'float', got "
                             f"{given!r} ({len(given)} item(s))")
        sides = []
        for side, item in zip(("weights", "activations"), given):
            if isinstance(item, (tuple, list)):
                raise ValueError(f"{where}: the {side} of a pair must be a recipe name, a Recipe or 'float', got "
                                 f"{item!r}")
            try:
                sides.append(_name(item))
            except (ValueError, TypeError) as err:
                raise _named(err, f"{where} ({side})") from None
        weights, acts = given
        if weights == FLOAT and acts == FLOAT:
            return FLOAT, FLOAT
        label = f"w={sides[0]},a={sides[1]}"
        act_quant = None if acts == FLOAT else recipe_of(acts).input_quant
        base = Recipe(label) if weights == FLOAT else recipe_of(weights).replace(name=label)
        return label, base.replace(input_quant=act_quant)
    if given == FLOAT:
        return FLOAT, FLOAT
    try:
        r = recipe_of(given)
    except (ValueError, TypeError) as err:
        raise _named(err, where) from None
    return r.name, r


def _group_bits(spec: Any, rows: int, features: int, per_tensor: int) -> int:
    """Scale bits of ``rows`` rows of ``features`` elements under a quantizer spec."""
    if spec.granularity == "group":
        size = spec.group_size or features
        return rows * -(-features // size) * spec.scale_format.bit_width
    if spec.granularity == "channel":
        return rows * 32
    return per_tensor


def layer_bits(candidate: Any, out_features: int, in_features: int, dtype: torch.dtype = torch.float32) -> int:
    """Storage bits of an ``[out, in]`` weight under ``candidate`` (a recipe, its name, or ``"float"``)."""
    if candidate == FLOAT:
        return out_features * in_features * torch.finfo(dtype).bits
    r = recipe_of(candidate)
    if r.weight_quant is None:
        return out_features * in_features * torch.finfo(dtype).bits
    spec = quantizer_spec(r.weight_quant)
    bits = out_features * in_features * spec.fmt.bit_width + _group_bits(spec, out_features, in_features, 32)
    return bits + (32 if spec.tensor_scale else 0)


def activation_bits(candidate: Any, in_features: int, dtype: torch.dtype = torch.float32) -> int:
    """Bits of one token's input row (``in_features`` elements) under ``candidate``'s input
    quantizer (a recipe, its name, or ``"float"``; module doc)."""
    if candidate == FLOAT:
        return in_features * torch.finfo(dtype).bits
    r = recipe_of(candidate)
    if r.input_quant is None:
        return in_features * torch.finfo(dtype).bits
    spec = quantizer_spec(r.input_quant)
    return in_features * spec.fmt.bit_width + _group_bits(spec, 1, in_features, 0)
