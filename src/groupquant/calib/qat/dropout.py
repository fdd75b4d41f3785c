"""Dropout during quantization-aware training: off by default.

Distillation teaches the quantized student its float teacher's function, and the teacher runs
without dropout (eval mode); a student that drops activations at random learns a noisier target than
the one it is measured against. Measured on a tiny random BERT (``tests/calib/qat/test_qat.py``):
with BERT's dropout of 0.1 the hidden-state loss stays near 0.27 and held-out embeddings get worse
than ptq's; without it the loss is about 0.05 and they get better. Language models such as Llama
have no dropout, so this changes nothing for them.

:func:`dropout_off` sets the probability ``p`` of every ``torch.nn`` dropout module (``Dropout``,
``Dropout1d/2d/3d``, ``AlphaDropout``, ``FeatureAlphaDropout``) to 0 for the duration and gives
each its own back afterwards. ``transformers``' attention reads its dropout probability from such a
module (BERT) or from a number in the config (Llama: 0 by default); dropout a model applies by other
means is left as it is.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, List, Tuple

from torch import nn

__all__ = ["DROPOUTS", "dropout_off"]

#: The dropout module classes whose probability :func:`dropout_off` sets to 0.
DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


@contextlib.contextmanager
def dropout_off(model: nn.Module, enabled: bool = True) -> Iterator[int]:
    """Inside, every dropout module of ``model`` has ``p = 0`` (module doc); yields how many there
    are (0 when ``enabled`` is False: nothing is changed)."""
    if not enabled:
        yield 0
        return
    saved: List[Tuple[nn.Module, float]] = [(m, m.p) for m in model.modules() if isinstance(m, DROPOUTS)]
    for m, _ in saved:
        m.p = 0.0
    try:
        yield len(saved)
    finally:
        for m, p in saved:
            m.p = p
