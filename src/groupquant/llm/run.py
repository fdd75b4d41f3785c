"""The language-model workflow behind ``python -m groupquant llm``: load, measure float, quantize
(round to nearest, or ``groupquant.ptq`` with calibration methods), pack, measure again,
optionally save a checkpoint, and report one table.

Steps, each with a progress bar where it takes time: (1) load the model (:mod:`.models`);
(2) token sets from the evaluation text (``groupquant.eval.token_sets``: evaluation windows
first, calibration windows from the documents after them); (3) float perplexity and generation;
(4) ``quantize_model(recipe=...)`` or ``ptq(..., methods=...)`` with the output head excluded
(kept in float); (5) ``pack_model``; (6) perplexity and generation from the packed weights;
(7) ``groupquant.save`` when a folder is given.
"""
from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from ..eval import perplexity, python_docstrings, token_sets
from ..eval.perplexity import context_length
from .errors import LlmInputError
from .measures import Generation, generate, model_bytes, path_bytes, quantized_weight_bits
from .models import LoadedModel, ModelSource, load_causal_lm, output_head_names, smollm2_gguf_path
from .option_checks import check_save_options
from .report import ReportRow

__all__ = ["LlmOptions", "LlmResult", "LlmInputError", "run_llm", "read_documents", "save_checkpoint",
           "SAVE_FORMATS", "CHECKPOINT_FILES", "DEFAULT_PROMPT"]

#: ``--format`` values (``groupquant.save``'s formats)
SAVE_FORMATS = ("safetensors", "compressed-tensors", "gguf")
#: the prompt timed for tokens per second when none is given
DEFAULT_PROMPT = "The quick brown fox"


@dataclass(frozen=True)
class LlmOptions:
    """The workflow's settings, resolved once.

    ``methods``: None for round to nearest (``quantize_model``); ``()`` for ``ptq``'s default
    methods of the recipe; else method names. ``eval_path``: a text file (documents separated by
    blank lines), None for Python's own docstrings. ``seq_len``: tokens per window (None: the
    smaller of 512 and the model's context). ``eval_tokens`` / ``calibration_tokens``: tokens of
    each set (whole windows, at least one). ``save_dir`` / ``save_format``: the checkpoint.
    ``prompt``: text to continue (printed), None to time :data:`DEFAULT_PROMPT` only.
    """

    source: ModelSource
    recipe: str
    methods: Optional[Tuple[str, ...]] = None
    eval_path: Optional[str] = None
    seq_len: Optional[int] = None
    eval_tokens: int = 4096
    calibration_tokens: int = 2048
    save_dir: Optional[str] = None
    save_format: str = "safetensors"
    prompt: Optional[str] = None
    max_new_tokens: int = 32
    progress: bool = True
    calibration_report: bool = False
    seed: int = 0
    functional: bool = False

    @property
    def method_label(self) -> str:
        """``rtn``, ``default`` or the ``+``-joined method names."""
        if self.methods is None:
            return "rtn"
        return "+".join(self.methods) if self.methods else "default"


@dataclass(frozen=True)
class LlmResult:
    """The report rows (float first), the generations by row label, the packed model."""

    rows: Tuple[ReportRow, ...]
    generations: Dict[str, Generation]
    model: nn.Module


def read_documents(path: str) -> List[str]:
    """The documents of a text file: paragraphs separated by blank lines (UTF-8)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as err:
        raise LlmInputError(f"--eval {path!r}: cannot read the text ({err})") from None
    return [p.strip() for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]


#: where each format's checkpoint goes inside ``--save DIR`` (compressed-tensors: the folder itself)
CHECKPOINT_FILES = {"safetensors": "model.safetensors", "gguf": "model.gguf", "compressed-tensors": None}


def save_checkpoint(model: nn.Module, directory: str, fmt: str, *, tokenizer=None,
                    gguf_source: Optional[str] = None) -> int:
    """``groupquant.save(model, path, format=fmt)`` with ``path`` from :data:`CHECKPOINT_FILES`
    under ``directory`` (GGUF: the tokenizer keys copied from ``gguf_source``, the file the model
    was loaded from, when there is one); the tokenizer's files are written beside the weights
    (``save_pretrained``), as serving engines expect. Returns the bytes of the checkpoint written
    (its weights and config files; not the tokenizer's, nor other files already in ``directory``)."""
    import groupquant

    save = getattr(groupquant, "save", None)
    if save is None:
        raise LlmInputError("--save: this groupquant has no groupquant.save (the checkpoint writers)")
    if fmt not in CHECKPOINT_FILES:
        raise LlmInputError(f"--format {fmt!r}: choose one of {', '.join(CHECKPOINT_FILES)}")
    os.makedirs(directory, exist_ok=True)
    name = CHECKPOINT_FILES[fmt]
    path = directory if name is None else os.path.join(directory, name)
    extra = {"tokenizer_from": gguf_source} if fmt == "gguf" and gguf_source else {}
    save(model, path, format=fmt, **extra)
    if tokenizer is not None and fmt != "gguf" and hasattr(tokenizer, "save_pretrained"):
        tokenizer.save_pretrained(directory)
    if name is not None:
        return path_bytes(path)
    from ..export.checkpoints.compressed_tensors import WEIGHTS_FILE
    return sum(path_bytes(os.path.join(directory, f)) for f in (WEIGHTS_FILE, "config.json"))


def _bar(desc: str, enabled: bool):
    """A one-step tqdm bar (elapsed time of a step without inner progress), or a silent stand-in."""
    if enabled:
        try:
            from tqdm.auto import tqdm
            return tqdm(total=1, desc=desc, leave=False)
        except ImportError:
            pass
    return contextlib.nullcontext(type("_Silent", (), {"update": lambda self, n=1: None})())


def _seq_len(options: LlmOptions, model: nn.Module) -> int:
    context = context_length(model)
    if options.seq_len is None:
        return min(512, context) if context else 512
    if context is not None and options.seq_len > context:
        raise LlmInputError(f"--seq-len {options.seq_len} is longer than the model's context "
                            f"(max_position_embeddings={context})")
    return options.seq_len


def _token_sets(options: LlmOptions, loaded: LoadedModel, seq_len: int):
    docs = python_docstrings() if options.eval_path is None else read_documents(options.eval_path)
    what = "Python's docstrings" if options.eval_path is None else f"--eval {options.eval_path!r}"
    calibration_windows = 0 if options.methods is None else max(1, options.calibration_tokens // seq_len)
    try:
        return token_sets(docs, loaded.tokenizer, seq_len=seq_len, evaluation_windows=max(1, options.eval_tokens // seq_len),
                          calibration_windows=calibration_windows)
    except ValueError as err:
        raise LlmInputError(f"{what}: text too short for the windows asked ({err}); give a longer text or lower "
                            "--seq-len / --eval-tokens / --calibration-tokens") from None


def _quantize(model: nn.Module, options: LlmOptions, calibration: Sequence[torch.Tensor],
              say: Callable[[str], None]) -> nn.Module:
    """Round to nearest (``quantize_model``) or ``ptq`` with the chosen methods (its per-layer
    report printed only with ``calibration_report``; a one-line summary otherwise)."""
    if options.methods is None:
        from ..nn import quantize_model

        return quantize_model(model, recipe=options.recipe, functional=options.functional, quantize_head=False)
    from ..calib import ptq

    table = io.StringIO()
    with contextlib.redirect_stdout(table):  # ptq prints its per-layer table; progress bars go to stderr
        model = ptq(model, list(calibration), recipe=options.recipe, methods=list(options.methods) or None,
                    functional=options.functional, quantize_head=False, progress=options.progress, seed=options.seed)
    reports = [r for r in getattr(model, "calibration_report", []) if r.error_before == r.error_before]
    better = sum(1 for r in reports if r.error_after < r.error_before)
    say(f"calibration ({options.method_label}): {len(reports)} layer-method steps, {better} lowered the "
        "calibration error (--calibration-report prints each)")
    if options.calibration_report:
        say(table.getvalue().rstrip())
    return model


def _measure(label: str, model: nn.Module, tokenizer, evaluation: torch.Tensor, seq_len: int,
             options: LlmOptions, bits: float) -> Tuple[ReportRow, Generation]:
    ppl = perplexity(model, evaluation, seq_len=seq_len, progress=options.progress)
    prompt = DEFAULT_PROMPT if options.prompt is None else options.prompt
    gen = generate(model, tokenizer, prompt, max_new_tokens=options.max_new_tokens)
    return ReportRow(label, bits, ppl, model_bytes(model), None, gen.tokens_per_second), gen


def run_llm(options: LlmOptions, say: Callable[[str], None] = print) -> LlmResult:
    """Run the workflow (module doc); ``say`` prints the lines between the progress bars."""
    from ..export import CheckpointError, pack_model

    if options.prompt is not None and not options.prompt.strip():
        raise LlmInputError("--generate: the prompt is empty; give text to continue (or leave --generate out to "
                            f"time {DEFAULT_PROMPT!r})")
    if options.seq_len is not None and options.seq_len < 2:
        raise LlmInputError(f"--seq-len {options.seq_len}: a window needs at least 2 tokens (each token is predicted "
                            "from the ones before it)")
    check_save_options(options)
    with _bar(f"loading {options.source.label}", options.progress) as bar:
        try:
            loaded = load_causal_lm(options.source)
        except (OSError, ValueError, KeyError) as err:  # transformers' errors on a model it cannot load
            raise LlmInputError(f"model {options.source.label!r}: transformers cannot load it: {err}") from None
        bar.update()
    model, tokenizer = loaded.model, loaded.tokenizer
    seq_len = _seq_len(options, model)
    sets = _token_sets(options, loaded, seq_len)
    say(f"{options.source.label}: evaluation {sets.evaluation.numel()} tokens ({sets.evaluation_documents} documents), "
        f"calibration {sets.calibration.numel()} tokens, windows of {seq_len}")
    for head in output_head_names(model):  # quantize_model's rule (groupquant.nn.output_head), said once here
        say(f"output head {head!r} kept in float")
    float_bits = float(next((m.weight.element_size() * 8 for m in model.modules() if isinstance(m, nn.Linear)), 32))
    float_row, float_gen = _measure(str(next(model.parameters()).dtype).replace("torch.", ""), model, tokenizer,
                                    sets.evaluation, seq_len, options, float_bits)
    model = _quantize(model, options, sets.calibration_inputs(), say)
    model = pack_model(model, progress=options.progress)
    label = f"{options.recipe} {options.method_label} packed"
    row, gen = _measure(label, model, tokenizer, sets.evaluation, seq_len, options,
                        quantized_weight_bits(model).per_weight)
    if options.save_dir is not None:
        with _bar(f"saving {options.save_format}", options.progress) as bar:
            gguf_source = options.source.path if options.source.kind == "gguf" else None
            if options.source.kind == "smollm2":
                gguf_source = smollm2_gguf_path()
            try:
                size = save_checkpoint(model, options.save_dir, options.save_format, tokenizer=tokenizer,
                                       gguf_source=gguf_source)
            except CheckpointError as err:  # what the checks before loading could not see
                raise LlmInputError(f"--save: {err}") from None
            bar.update()
        row = ReportRow(row.label, row.bits_per_weight, row.perplexity, row.weight_bytes, size, row.tokens_per_second)
        say(f"saved {options.save_format} to {options.save_dir}")
    return LlmResult((float_row, row), {float_row.label: float_gen, label: gen}, model)
