"""Routing a layer's extra keywords to its quantizers by prefix (``weight_bit_width=4``)."""
from __future__ import annotations

import difflib
from typing import Any, Dict, Mapping, Optional

from ..inject import UnknownSettingError, known_settings

__all__ = ["route_keywords"]

#: Names other libraries use for a layer argument, and groupquant's name for it.
_ALIASES = {"act_quant": "output_quant", "return_quant_tensors": "return_quant_tensor"}


def route_keywords(kwargs: Mapping[str, Any], quants: Mapping[str, Optional[type]],
                   context: str) -> Dict[str, Dict[str, Any]]:
    """Split ``kwargs`` by the prefixes of ``quants`` (``'weight_'``, ``'input_'``, ...), prefix
    stripped. A keyword with none of the prefixes is a ValueError naming it, with the closest
    prefixed setting of the layer's quantizers suggested."""
    routed: Dict[str, Dict[str, Any]] = {prefix: {} for prefix in quants}
    for key, given in kwargs.items():
        prefix = next((p for p in sorted(quants, key=len, reverse=True) if key.startswith(p)), None)
        if prefix is not None:
            routed[prefix][key[len(prefix):]] = given
            continue
        candidates = sorted(p + name for p, q in quants.items() if q is not None
                            for name in known_settings(q) if not name.startswith("_"))
        candidates += [p + "quant" for p in quants]
        match = [_ALIASES[key]] if key in _ALIASES else difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
        hint = (f"; did you mean {match[0]!r}?" if match else
                f"; quantizer settings take a prefix: {', '.join(p + '...' for p in quants)}")
        raise UnknownSettingError(key, f"{context} got unknown keyword {key!r}{hint}", match[0] if match else None)
    return routed
