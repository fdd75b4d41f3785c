"""Training: :func:`qat`, quantization-aware training of a language model by distillation from its
float self, from ``ptq`` (or an already converted model) to a trained quantized model. See docs/qat.md."""
from .distill import Distillation, LossParts, distillation_loss, hidden_state_loss, kl_on_logits, next_token_loss
from .history import StepRecord, format_history
from .qat import qat
from .schedule import Schedule
from .trainable import DEFAULT_PARTS, PARTS, Trainable, select_trainable

__all__ = ["qat", "Distillation", "LossParts", "distillation_loss", "kl_on_logits", "next_token_loss",
           "hidden_state_loss", "StepRecord", "format_history", "Schedule", "PARTS", "DEFAULT_PARTS", "Trainable",
           "select_trainable"]
