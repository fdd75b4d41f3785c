"""Training recipes: named, frozen sets of quantizers for every operand of every GEMM.

A :class:`Recipe` fills the forward slots (``weight_quant``, ``input_quant``) and the backward
ones (``grad_output_quant`` and the per-GEMM overrides, see :mod:`groupquant.nn.gemm.grad_slots`).
``quantize_model(model, recipe="mxfp8")`` applies one; ``recipe("mxfp8").replace(grad_output_quant=
MXFloat8e5m2Act)`` overrides slot by slot (an unknown slot is an error with a did-you-mean), and
``print(recipe("mxfp8"))`` / ``describe()`` shows every slot.

The built-in recipes (E4M3 quantizers for weights and inputs unless the name says otherwise):

=========================  =============================================================
``mxfp8``                  MXFP8 E4M3 for weights, inputs and gradients in every GEMM
``mxfp8_e4m3_e5m2``        E4M3 forward, E5M2 gradients (dY in both backward GEMMs)
``mxfp6_e2m3``             MXFP6 E2M3 for every operand
``mxfp6_e3m2``             MXFP6 E3M2 for every operand
``mxint8``                 MXINT8 for every operand
``mxfp4``                  MXFP4 for every operand (microxcaling with the backward formats unset)
``mxfp4_fwd_mxfp8_bwd``    MXFP4 weights and inputs forward; every backward operand MXFP8 E4M3
``mxfp4_weight_only``      MXFP4 weights, float inputs, float backward (straight through)
``mxfp8_weight_only``      MXFP8 E4M3 weights, float inputs, float backward
``nvfp4``                  NVFP4 (FP4, E4M3 scales per 16, FP32 tensor scale) for every operand
``nvfp4_weight_only``      NVFP4 weights, float inputs, float backward
=========================  =============================================================
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Optional

from ..inject import ConfigError, UnknownSettingError, closest
from ..quantizers import (MXFloat4e2m1Act, MXFloat4e2m1Weight, MXFloat6e2m3Act, MXFloat6e2m3Weight, MXFloat6e3m2Act,
                          MXFloat6e3m2Weight, MXFloat8e4m3Act, MXFloat8e4m3Weight, MXFloat8e5m2Act, MXInt8Act,
                          MXInt8Weight, NVFP4Act, NVFP4Weight)
from ..ops.precision import resolve_precision
from .gemm.backward_gemm import TOKEN_GROUPS
from .gemm.gemm_rounding import GemmRounding
from .gemm.grad_slots import GRAD_SLOTS, SAME, check_grad_slot

__all__ = ["Recipe", "RECIPES", "recipe"]


#: The GEMM slots a recipe fills: the forward ones and the backward table's (:mod:`groupquant.nn.gemm.grad_slots`).
_SLOTS = ("weight_quant", "input_quant", *GRAD_SLOTS)


def _name(given: Any) -> str:
    if isinstance(given, GemmRounding):
        return given.describe()
    return given.__name__ if isinstance(given, type) else repr(given)


@dataclass(frozen=True)
class Recipe:
    """Quantizers for every slot of a GEMM layer (None: float; ``SAME``: the slot's default)."""

    name: str
    weight_quant: Optional[type] = None
    input_quant: Optional[type] = None
    grad_output_quant: Optional[type] = None
    weight_quant_for_grad_input: Any = SAME
    grad_output_quant_for_grad_weight: Any = SAME
    input_quant_for_grad_weight: Any = SAME
    quantize_backprop: Optional[bool] = None
    elementwise: Optional[str] = None  # e.g. "bfloat16": element-wise ops of the forward in that precision
    gemm_rounding: Optional[GemmRounding] = None  # operands / output / gradients rounded (see .gemm_rounding)
    grad_weight_groups: str = "tokens"  # or "sequence" (see .backward_gemm.TOKEN_GROUPS)

    def __post_init__(self) -> None:
        for slot in _SLOTS:
            check_grad_slot(slot, getattr(self, slot), f"Recipe {self.name!r}")
        if self.gemm_rounding is not None and not isinstance(self.gemm_rounding, GemmRounding):
            raise TypeError(f"Recipe {self.name!r}: gemm_rounding must be a groupquant.nn.GemmRounding or None, "
                            f"got {self.gemm_rounding!r}")
        if self.grad_weight_groups not in TOKEN_GROUPS:
            raise ConfigError("grad_weight_groups", f"Recipe {self.name!r}: grad_weight_groups must be one of "
                                                    f"{TOKEN_GROUPS}, got {self.grad_weight_groups!r}")
        if self.elementwise is not None:
            try:
                resolve_precision(self.elementwise)
            except (ValueError, TypeError) as err:
                raise ConfigError("elementwise", f"Recipe {self.name!r}: {err}") from None

    def replace(self, **slots: Any) -> "Recipe":
        """A copy with some slots changed (``name`` too); an unknown slot is an UnknownSettingError."""
        known = [f.name for f in dataclasses.fields(self)]
        for key in slots:
            if key not in known:
                match = closest(key, known)
                hint = f"; did you mean {match!r}?" if match else f"; slots: {', '.join(known)}"
                raise UnknownSettingError(key, f"Recipe {self.name!r} has no slot {key!r}{hint}", match)
        return dataclasses.replace(self, **slots)

    def layer_kwargs(self) -> Dict[str, Any]:
        """The keywords a GEMM layer takes for this recipe (slots left at their default omitted)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("name", "elementwise")}
        defaults = {"quantize_backprop": None, "gemm_rounding": None, "grad_weight_groups": "tokens"}
        return {k: v for k, v in out.items() if v is not SAME and not (k in defaults and v == defaults[k])}

    @property
    def quantizes_activations(self) -> bool:
        """Whether the recipe changes GEMMs between activations or element-wise ops (an input or
        output-gradient quantizer, or an element-wise precision): what the functional mode is for.
        A weight-only recipe does not, so ``quantize_model`` leaves the mode off for it by default."""
        return self.input_quant is not None or self.grad_output_quant is not None or self.elementwise is not None

    def describe(self) -> str:
        """Every slot and its quantizer, one per line."""
        rows = [(f.name, _name(getattr(self, f.name))) for f in dataclasses.fields(self) if f.name != "name"]
        width = max(len(n) for n, _ in rows)
        return "\n".join([f"Recipe {self.name!r}"] + [f"{n.ljust(width)}  {v}" for n, v in rows])

    __str__ = describe


def _everywhere(name: str, weight: type, act: type) -> Recipe:
    """One format for every operand of every GEMM."""
    return Recipe(name, weight_quant=weight, input_quant=act, grad_output_quant=act)


#: Recipe name -> recipe.
RECIPES: Dict[str, Recipe] = {r.name: r for r in (
    _everywhere("mxfp8", MXFloat8e4m3Weight, MXFloat8e4m3Act),
    Recipe("mxfp8_e4m3_e5m2", weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act,
           grad_output_quant=MXFloat8e5m2Act),
    _everywhere("mxfp6_e2m3", MXFloat6e2m3Weight, MXFloat6e2m3Act),
    _everywhere("mxfp6_e3m2", MXFloat6e3m2Weight, MXFloat6e3m2Act),
    _everywhere("mxint8", MXInt8Weight, MXInt8Act),
    _everywhere("mxfp4", MXFloat4e2m1Weight, MXFloat4e2m1Act),
    Recipe("mxfp4_fwd_mxfp8_bwd", weight_quant=MXFloat4e2m1Weight, input_quant=MXFloat4e2m1Act,
           grad_output_quant=MXFloat8e4m3Act, weight_quant_for_grad_input=MXFloat8e4m3Weight,
           input_quant_for_grad_weight=MXFloat8e4m3Act),
    Recipe("mxfp4_weight_only", weight_quant=MXFloat4e2m1Weight),
    Recipe("mxfp8_weight_only", weight_quant=MXFloat8e4m3Weight),
    _everywhere("nvfp4", NVFP4Weight, NVFP4Act),
    Recipe("nvfp4_weight_only", weight_quant=NVFP4Weight),
)}


def recipe(name: Any) -> Recipe:
    """The recipe called ``name`` (a :class:`Recipe` passes through); a ValueError with a
    did-you-mean for an unknown name."""
    if isinstance(name, Recipe):
        return name
    if not isinstance(name, str):
        raise TypeError(f"recipe must be a name or a Recipe, got {name!r}")
    if name not in RECIPES:
        match = closest(name, RECIPES, cutoff=0.5)
        hint = f"did you mean {match!r}? " if match else ""
        raise UnknownSettingError("recipe", f"unknown recipe {name!r}; {hint}recipes: {', '.join(RECIPES)}", match)
    return RECIPES[name]
