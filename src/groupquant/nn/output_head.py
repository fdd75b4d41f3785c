"""The output head of a language model: which layer it is, and the rule that keeps it float.

A causal language model's output head (``lm_head``) maps the last hidden state onto the
vocabulary. Quantizing it costs the most accuracy of any layer (SmolLM2-135M under MXFP4: the
perplexity multiplies by ~3.6 from the head alone), and in most models it shares its weight with
the input embedding table (``tie_word_embeddings``), so every LLM flow keeps it float. The rule
(:func:`groupquant.quantize_model`, :func:`groupquant.ptq`):

- a layer is a *head* when it is the model's output embedding (``model.get_output_embeddings()``
  of a transformers model) or when its weight is the very Parameter of an ``nn.Embedding`` of the
  model (a tied head, whatever the model's class);
- ``quantize_head=None`` (the default) keeps each head float and says so in one line (logger
  ``groupquant.nn.output_head`` at INFO; printed to stderr as well when logging would not show
  that record, so it is seen by default); ``quantize_head=False`` keeps it float silently; ``True`` quantizes it;
- an ``include`` pattern that matches a head's name selects it (the user named it), an
  ``exclude`` pattern always wins; ``filter_fn`` can leave a head float but not select one (use
  ``quantize_head=True`` or ``include``).

The embeddings themselves are never converted (``quantize_model`` converts Linear / Conv layers
only), so they stay float either way; a quantized tied head stays tied (the quant layer keeps the
very Parameter).
"""
from __future__ import annotations

import logging
import sys
from typing import Dict, List, Optional

from torch import nn

from .name_patterns import matches_any

__all__ = ["output_heads", "head_kept_float", "check_quantize_head", "announce_kept_heads", "logger"]

logger = logging.getLogger(__name__)


def check_quantize_head(quantize_head: Optional[bool], caller: str) -> None:
    """TypeError naming the setting unless ``quantize_head`` is None, True or False."""
    if quantize_head is not None and not isinstance(quantize_head, bool):
        raise TypeError(f"{caller}(quantize_head=...) takes None (keep the output head float and say so), "
                        f"False (keep it float silently) or True (quantize it), got {quantize_head!r}")


def _embedding_weights(model: nn.Module) -> Dict[int, str]:
    """``id(weight) -> name`` of every ``nn.Embedding`` weight in ``model``."""
    return {id(m.weight): f"{name}.weight" if name else "weight"
            for name, m in model.named_modules() if isinstance(m, nn.Embedding)}


def output_heads(model: nn.Module) -> Dict[int, str]:
    """``id(layer) -> why`` for each output head of ``model`` (module docstring's rule): its
    output embedding (``get_output_embeddings()``, when the model has one) and every module whose
    ``weight`` is an ``nn.Embedding``'s weight. ``why`` is a short phrase for the notice."""
    heads: Dict[int, str] = {}
    get = getattr(model, "get_output_embeddings", None)
    if callable(get):
        try:
            head = get()
        except (AttributeError, NotImplementedError):
            head = None
        if isinstance(head, nn.Module) and not isinstance(head, nn.Embedding):
            heads[id(head)] = "the model's output head"
    embeddings = _embedding_weights(model)
    for m in model.modules():
        weight = getattr(m, "weight", None)
        if not isinstance(m, nn.Embedding) and weight is not None and id(weight) in embeddings:
            heads[id(m)] = f"tied to {embeddings[id(weight)]}"
    return heads


def head_kept_float(module: nn.Module, names: List[str], heads: Dict[int, str], include: Optional[List[str]],
                    quantize_head: Optional[bool]) -> Optional[str]:
    """``"'name' (why)"`` when ``module`` (registered under ``names``) is one of ``heads`` (from
    :func:`output_heads`) and the rule keeps it float: ``quantize_head`` is not True and no
    ``include`` pattern names it; else None (the layer follows the patterns)."""
    why = heads.get(id(module))
    if why is None or quantize_head:
        return None
    if include is not None and any(matches_any(name, include) for name in names):
        return None
    return f"{names[0]!r} ({why})"


def announce_kept_heads(kept: List[str], caller: str) -> None:
    """One line naming the heads kept float (``kept``: ``"name (why)"``), to the module logger at
    INFO and to stderr when that record would reach no handler (logging not configured for INFO)."""
    if not kept:
        return
    line = (f"groupquant.{caller}: kept the output head {', '.join(kept)} in float (the usual choice for language "
            f"models); pass quantize_head=True to quantize it, quantize_head=False to silence this line")
    logger.info(line)
    if not (logger.isEnabledFor(logging.INFO) and logger.hasHandlers()):
        print(line, file=sys.stderr)
