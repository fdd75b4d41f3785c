"""The error of the language-model workflow for a setting or input that cannot work."""
from __future__ import annotations

__all__ = ["LlmInputError"]


class LlmInputError(ValueError):
    """A setting or input of the workflow that cannot work (the message names the option)."""
