"""The main job behind ``python -m groupquant demo``: MX quantization of a model trained on real data.

Steps (see :func:`run_demo`): load scikit-learn's built-in digits; train a float MLP; post-training
quantize it to every MX format (weights and activations, blocks of 32) and NVFP4, and measure weight SQNR,
test accuracy and packed size; fine-tune the MXFP4 model with quantization-aware training. With a
training recipe (``DemoOptions(recipe="mxfp8")``), train a copy of the initial model with every
GEMM operand quantized, forward and backward.
Needs the ``demo`` extra (scikit-learn, tqdm).
"""
from .data import DigitsSplit, load_digits_split, require_demo_packages
from .model import (GEMM_SLOTS, MX_QUANTIZERS, MXQuantizerPair, build_mlp, gemm_operands, mx_quantizers,
                    packed_model_bytes, quantized_copy, recipe_copy, weight_sqnr_db)
from .pipeline import DemoOptions, DemoReport, FormatResult, RecipeResult, bits_per_element, run_demo
from .report import format_report, report_to_dict, report_to_json
from .training import Evaluation, TrainConfig, TrainHistory, evaluate, gradient_sqnr_db, train_classifier

__all__ = [
    "DigitsSplit", "load_digits_split", "require_demo_packages", "MX_QUANTIZERS", "MXQuantizerPair",
    "mx_quantizers", "build_mlp",
    "packed_model_bytes", "quantized_copy", "weight_sqnr_db", "DemoOptions", "DemoReport",
    "FormatResult", "bits_per_element", "run_demo", "format_report", "report_to_dict",
    "report_to_json", "Evaluation", "TrainConfig", "TrainHistory", "evaluate", "train_classifier",
    "GEMM_SLOTS", "recipe_copy", "gemm_operands", "RecipeResult", "gradient_sqnr_db",
]
