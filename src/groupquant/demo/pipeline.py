"""The main job, end to end: float training, post-training quantization to each MX format, QAT,
and (``recipe=...``) training from scratch with an MX training recipe.

:func:`run_demo` returns a :class:`DemoReport`; ``groupquant.demo.report`` prints it.
"""
from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..formats import get_format, get_scheme
from ..nn import QuantLinear, recipe as recipe_of
from ..quantizers import BLOCK_FORMATS, canonical_block_format, quantizer_pair
from .data import load_digits_split
from .packed_inference import PackedResult, measure_packed
from .model import (build_mlp, gemm_operands, packed_model_bytes, quantized_copy, recipe_copy,
                    weight_sqnr_db)
from .training import Evaluation, TrainConfig, evaluate, gradient_sqnr_db, train_classifier

__all__ = ["DemoOptions", "FormatResult", "RecipeResult", "DemoReport", "run_demo", "SCALE_BITS", "BLOCK_SIZE"]

BLOCK_SIZE = 32
SCALE_BITS = 8  # one E8M0 byte per block


@dataclass(frozen=True)
class DemoOptions:
    """Settings of the demo.

    Fields:
        formats: block formats to post-training quantize to: MX element formats (names as
            ``groupquant.get_format`` takes) and ``'nvfp4'``; may be empty when ``recipe`` is set.
        float_epochs: epochs of float training (and of training with ``recipe``).
        qat_epochs: epochs of QAT fine-tuning (0 skips QAT).
        qat_format: the format fine-tuned with QAT (MXFP4, the coarsest, by default).
        seed: data split, initialization and batch order.
        hidden: hidden layer widths of the MLP.
        progress: show progress bars (on stderr).
        recipe: a training recipe's name (``groupquant.nn.RECIPES``) or None. When set, a copy of
            the float model's initial weights is converted with it and trained from scratch with
            the float run's settings (epochs, learning rate, batch order): every GEMM of training,
            forward and backward, runs on quantized operands.
    """

    formats: Tuple[str, ...] = BLOCK_FORMATS
    float_epochs: int = 15
    qat_epochs: int = 4
    qat_format: str = "fp4_e2m1"
    seed: int = 0
    hidden: Tuple[int, ...] = (128, 128)
    progress: bool = True
    recipe: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.formats and self.recipe is None:
            raise ValueError("formats must name at least one format (or give a recipe)")
        for name in (*self.formats, self.qat_format):
            quantizer_pair(name)
        if self.recipe is not None:
            recipe_of(self.recipe)  # an unknown name: UnknownSettingError with a did-you-mean


@dataclass(frozen=True)
class FormatResult:
    """One row of the table: a format's size and error after post-training quantization.

    ``bits_per_element`` counts the shared scale (element bits + 8/32; NVFP4 4 + 8/16); ``weight_sqnr_db`` is over
    all weights; ``test`` is the quantized model's test accuracy and loss; ``packed_bytes`` the model
    size stored packed (weights and scales; float32 biases).
    """

    fmt: str
    bits_per_element: float
    weight_sqnr_db: float
    test: Evaluation
    packed_bytes: int


@dataclass(frozen=True)
class RecipeResult:
    """The model trained from scratch with a training recipe, beside the float model.

    ``operands``: what quantizes each operand of each GEMM (slot -> quantizer class name, None for
    high precision, see :func:`groupquant.demo.model.gemm_operands`), the same in every layer;
    ``layers``: the quantized layers; ``backward_quantized``: whether the backward GEMMs quantize
    (False: straight-through, as weight-only recipes do). ``initial_grad_sqnr_db``: SQNR of the
    weight gradients at the initial weights (one pass over the training set) against float's.
    ``test`` is its test accuracy and loss, ``loss_curve`` the training loss of each epoch.
    """

    name: str
    operands: Dict[str, Optional[str]]
    layers: int
    backward_quantized: bool
    initial_grad_sqnr_db: float
    test: Evaluation
    loss_curve: List[float]


@dataclass
class DemoReport:
    """Everything the demo measured (see :func:`run_demo`). Times in seconds."""

    options: DemoOptions
    train_size: int
    test_size: int
    num_parameters: int
    float_test: Evaluation
    float_bytes: int
    float_loss_curve: List[float]
    ptq: List[FormatResult] = field(default_factory=list)
    qat_format: Optional[str] = None
    qat_before: Optional[Evaluation] = None
    qat_after: Optional[Evaluation] = None
    qat_loss_curve: List[float] = field(default_factory=list)
    recipe: Optional[RecipeResult] = None
    packed: List[PackedResult] = field(default_factory=list)
    seconds: float = 0.0


def bits_per_element(fmt: str, block_size: int = BLOCK_SIZE) -> float:
    """Storage bits per element including the shared scale: ``bit_width + 8 / block_size`` (a scheme
    such as ``'nvfp4'``: its own block and scale format; the per-tensor scale not counted)."""
    scheme = get_scheme(fmt)
    if scheme is not None:
        return scheme.bits_per_element
    return get_format(fmt).bit_width + SCALE_BITS / block_size


def run_demo(options: DemoOptions = DemoOptions()) -> DemoReport:
    """Train a float MLP on digits, quantize it to each format, QAT-tune ``options.qat_format``,
    and train a copy of the initial model with ``options.recipe``."""
    start = time.perf_counter()
    data = load_digits_split(seed=options.seed)
    model = build_mlp(data.num_features, options.hidden, seed=options.seed)
    initial = copy.deepcopy(model)
    train_config = TrainConfig(epochs=options.float_epochs, seed=options.seed, progress=options.progress,
                               desc="float training")
    history = train_classifier(model, data.x_train, data.y_train, train_config)
    report = DemoReport(
        options=options, train_size=len(data.y_train), test_size=len(data.y_test),
        num_parameters=sum(p.numel() for p in model.parameters()),
        float_test=evaluate(model, data.x_test, data.y_test),
        float_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
        float_loss_curve=history.epoch_loss)
    for fmt in options.formats:
        qmodel = quantized_copy(model, fmt)
        report.ptq.append(FormatResult(
            fmt=canonical_block_format(fmt), bits_per_element=bits_per_element(fmt),
            weight_sqnr_db=weight_sqnr_db(model, qmodel), test=evaluate(qmodel, data.x_test, data.y_test),
            packed_bytes=packed_model_bytes(qmodel)))
        report.packed.append(measure_packed(model, qmodel, canonical_block_format(fmt), data.x_test, data.y_test))
    if options.qat_epochs > 0:
        qmodel = quantized_copy(model, options.qat_format)
        report.qat_format = canonical_block_format(options.qat_format)
        report.qat_before = evaluate(qmodel, data.x_test, data.y_test)
        qat = train_classifier(qmodel, data.x_train, data.y_train, TrainConfig(
            epochs=options.qat_epochs, lr=5e-4, seed=options.seed + 1, progress=options.progress,
            desc=f"QAT {report.qat_format}"))
        report.qat_after = evaluate(qmodel, data.x_test, data.y_test)
        report.qat_loss_curve = qat.epoch_loss
    if options.recipe is not None:
        report.recipe = _train_recipe(options.recipe, initial, data, train_config)
    report.seconds = time.perf_counter() - start
    return report


def _train_recipe(name: str, initial, data, config: TrainConfig) -> RecipeResult:
    """Convert a copy of ``initial`` (the float model before training) with recipe ``name`` and
    train it exactly as the float model was (same epochs, learning rate and batch order)."""
    qmodel = recipe_copy(initial, name)
    layers = [m for m in qmodel.modules() if isinstance(m, QuantLinear)]
    sqnr = gradient_sqnr_db(initial, qmodel, data.x_train, data.y_train)
    history = train_classifier(qmodel, data.x_train, data.y_train,
                               dataclasses.replace(config, desc=f"recipe {name}"))
    return RecipeResult(name=recipe_of(name).name, operands=gemm_operands(layers[0]), layers=len(layers),
                        backward_quantized=all(m.quantize_backprop for m in layers), initial_grad_sqnr_db=sqnr,
                        test=evaluate(qmodel, data.x_test, data.y_test), loss_curve=history.epoch_loss)
