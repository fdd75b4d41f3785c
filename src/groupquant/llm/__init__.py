"""Language models end to end (the apps layer): load a causal LM from local files
(:mod:`.models`), measure it (:mod:`.measures`), and the workflow behind
``python -m groupquant llm`` (:mod:`.run`, its table in :mod:`.report`). Needs the ``llm`` extra
(transformers, accelerate, gguf, ...); importing this package does not import them."""
from .measures import Generation, WeightBits, generate, model_bytes, path_bytes, quantized_weight_bits
from .models import (KNOWN_MODELS, LLM_EXTRA_HINT, LoadedModel, ModelSource, keep_first_layers, load_causal_lm,
                     load_smollm2, output_head_names, resolve_model_source, smollm2_gguf_path)
from .report import ReportRow, format_report
from .run import DEFAULT_PROMPT, SAVE_FORMATS, LlmInputError, LlmOptions, LlmResult, run_llm

__all__ = ["Generation", "WeightBits", "generate", "model_bytes", "path_bytes", "quantized_weight_bits",
           "KNOWN_MODELS", "LLM_EXTRA_HINT", "LoadedModel", "ModelSource", "keep_first_layers", "load_causal_lm",
           "load_smollm2", "output_head_names", "resolve_model_source", "smollm2_gguf_path", "ReportRow",
           "format_report", "DEFAULT_PROMPT", "SAVE_FORMATS", "LlmInputError", "LlmOptions", "LlmResult", "run_llm"]
