"""Token sets for calibration and evaluation, built from text the user gives.

:func:`token_sets` tokenizes documents in the given order and fills the evaluation windows
first, then the calibration windows from the documents after them: the two sets never share a
document. :func:`python_docstrings` gives text that every Python installation holds (standard
library docstrings, :func:`inspect.getdoc`), which the docs, tests and benchmarks use.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Callable, Iterable, List, Sequence, Union

import torch

__all__ = ["TokenSets", "token_sets", "python_docstrings", "STDLIB_MODULES"]

#: standard-library modules whose docstrings :func:`python_docstrings` reads by default (pure Python, stable)
STDLIB_MODULES = ("argparse", "asyncio", "collections", "concurrent.futures", "configparser", "contextlib", "csv",
                  "dataclasses", "datetime", "decimal", "difflib", "email", "enum", "fractions", "functools",
                  "http.client", "inspect", "ipaddress", "json", "logging", "pathlib", "pickle", "random", "re",
                  "shutil", "statistics", "string", "subprocess", "tarfile", "textwrap", "threading", "typing",
                  "unittest", "urllib.parse", "uuid", "zipfile")


@dataclass(frozen=True)
class TokenSets:
    """``evaluation``: 1-D token ids (``evaluation_windows * seq_len``, for :func:`perplexity`);
    ``calibration``: ``[calibration_windows, seq_len]`` (one model input per row: iterate
    ``calibration[i:i+1]``); ``documents``: how many documents each set used."""

    evaluation: torch.Tensor
    calibration: torch.Tensor
    evaluation_documents: int
    calibration_documents: int

    def calibration_inputs(self) -> List[torch.Tensor]:
        """The calibration windows as a list of ``[1, seq_len]`` model inputs."""
        return [row[None] for row in self.calibration]


def python_docstrings(modules: Sequence[str] = STDLIB_MODULES) -> List[str]:
    """The docstrings (``inspect.getdoc``) of ``modules`` and of their public classes and functions,
    in a fixed order (module order, then names sorted), each once."""
    docs, seen = [], set()
    for name in modules:
        module = importlib.import_module(name)
        objects = [module] + [getattr(module, attr) for attr in sorted(vars(module)) if not attr.startswith("_")]
        for obj in objects:
            if not (inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if obj is not module and getattr(obj, "__module__", name) != name:
                continue  # imported from elsewhere
            doc = inspect.getdoc(obj)
            if doc and doc not in seen:
                seen.add(doc)
                docs.append(doc)
    return docs


Tokenizer = Union[Callable[[str], List[int]], object]


def _encode(tokenizer: Tokenizer, text: str) -> List[int]:
    encode = getattr(tokenizer, "encode", None)
    if encode is not None:
        try:
            return list(encode(text, add_special_tokens=False))
        except TypeError:
            return list(encode(text))
    if callable(tokenizer):
        return list(tokenizer(text))
    raise TypeError(f"token_sets: tokenizer must have .encode(text) (a transformers tokenizer) or be a callable "
                    f"text -> token ids, got {type(tokenizer).__name__}")


def _fill(docs: Iterable[str], tokenizer: Tokenizer, need: int, separator: str) -> tuple:
    """Tokens of whole documents (joined by ``separator``) until ``need`` are there; (tokens, documents used)."""
    tokens: List[int] = []
    used = 0
    if need == 0:
        return tokens, used
    for doc in docs:  # stop right after the document that fills the set (the iterator keeps the rest)
        tokens += _encode(tokenizer, (separator if tokens else "") + doc)
        used += 1
        if len(tokens) >= need:
            break
    return tokens, used


def token_sets(texts: Iterable[str], tokenizer: Tokenizer, *, seq_len: int, evaluation_windows: int,
               calibration_windows: int, separator: str = "\n\n") -> TokenSets:
    """Disjoint evaluation and calibration token sets from ``texts`` (documents, in order).

    ``tokenizer``: a transformers tokenizer (``encode(text, add_special_tokens=False)``) or a
    callable ``text -> token ids``. Evaluation takes whole documents from the start until it
    holds ``evaluation_windows * seq_len`` tokens (cut to that length); calibration continues with
    the following documents. ValueError (with the counts) when the text is too short.
    """
    for name, v in (("seq_len", seq_len), ("evaluation_windows", evaluation_windows),
                    ("calibration_windows", calibration_windows)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (2 if name == "seq_len" else 0):
            raise ValueError(f"token_sets: {name} must be an int >= {2 if name == 'seq_len' else 0}, got {v!r}")
    docs = iter(texts)
    ev, ev_docs = _fill(docs, tokenizer, evaluation_windows * seq_len, separator)
    cal, cal_docs = _fill(docs, tokenizer, calibration_windows * seq_len, separator)
    for what, got, windows, n_docs in (("evaluation", ev, evaluation_windows, ev_docs),
                                       ("calibration", cal, calibration_windows, cal_docs)):
        if len(got) < windows * seq_len:
            raise ValueError(f"token_sets: the text gives {len(got)} {what} tokens from {n_docs} documents, fewer than "
                             f"{what}_windows * seq_len = {windows} * {seq_len}; give more text or fewer windows")
    return TokenSets(torch.tensor(ev[:evaluation_windows * seq_len], dtype=torch.long),
                     torch.tensor(cal[:calibration_windows * seq_len], dtype=torch.long).reshape(-1, seq_len),
                     ev_docs, cal_docs)
