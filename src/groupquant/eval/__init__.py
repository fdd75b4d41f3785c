"""Evaluation of language models: perplexity on token windows, and token sets built from text the
user gives (the package ships no corpus; :func:`python_docstrings` collects text available offline)."""
from .perplexity import perplexity
from .text_sets import TokenSets, python_docstrings, token_sets

__all__ = ["TokenSets", "perplexity", "python_docstrings", "token_sets"]
