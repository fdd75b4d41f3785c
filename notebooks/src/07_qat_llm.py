# %% [markdown]
# # Quantization-aware training of a language model: `groupquant.qat`
#
# `groupquant.ptq` wins back much of what round to nearest loses, without training.
# `groupquant.qat(model, data, recipe=..., steps=...)` goes on from there: it keeps the float model
# as the teacher, converts and calibrates a copy with `ptq`, and trains it to match the teacher's
# output distribution (KL divergence on the logits; optionally hidden states and the plain
# language-model loss), measuring the perplexity of held-out text every few steps and keeping the
# best step ([docs/qat.md](../docs/qat.md)).
#
# A tiny Llama (hidden 64, 2 layers, random weights with peaked outputs) stands in for a real
# model, so this notebook runs in seconds; its text is sampled from the float model itself, so
# the float model is the best model of it. The SmolLM2-135M figures are in the docs
# (`benchmarks/qat_llm.py`).

# %%
import copy
import time
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto, imported by transformers

import matplotlib.pyplot as plt
import torch
import transformers

import groupquant as gq
from groupquant.eval import perplexity

plt.rcParams.update({"figure.dpi": 60, "figure.figsize": (8, 2.8), "font.size": 10})
torch.set_num_threads(1)

cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                               initializer_range=0.2)
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(cfg).eval()
with torch.no_grad():  # 128 training items of [2, 32] tokens and 32 x 32 held-out tokens, sampled from the model
    text = model.generate(torch.zeros(288, 1, dtype=torch.long), do_sample=True, max_new_tokens=31,
                          min_new_tokens=31, pad_token_id=None, eos_token_id=None)
data = [text[i:i + 2] for i in range(0, 256, 2)]
held_out = text[256:].reshape(-1)
float_ppl = perplexity(model, held_out, seq_len=32, progress=False)
print(f"float perplexity on held-out text: {float_ppl:.2f}")

# %% [markdown]
# ## Round to nearest, ptq, qat
#
# MXFP4 weights and activations (`recipe="mxfp4"`; the output head stays float). `qat` trains
# the decoder's weights and norms (embeddings and head frozen) with AdamW, a warm-up and a cosine
# decay, evaluating every 8 steps; with `patience` it would stop once held-out perplexity stops
# improving. At the end it keeps the parameters of its best evaluation.

# %%
rtn = gq.quantize_model(copy.deepcopy(model), recipe="mxfp4", quantize_head=False)
ptq = gq.ptq(copy.deepcopy(model), data, recipe="mxfp4", quantize_head=False, progress=False)
start = time.perf_counter()
trained = gq.qat(copy.deepcopy(model), data, recipe="mxfp4", quantize_head=False, steps=96, lr=3e-3,
                 warmup_steps=4, eval_data=held_out, eval_every=8, eval_seq_len=32, progress=False)
seconds = time.perf_counter() - start
for name, m in (("round to nearest", rtn), ("ptq", ptq), ("qat", trained)):
    print(f"{name:<17} perplexity {perplexity(m, held_out, seq_len=32, progress=False):7.2f}")
print(f"qat: {len(trained.qat_history) - 1} steps in {seconds:.1f} s, kept step {trained.qat_best_step}")

# %% [markdown]
# ## The training curve
#
# `model.qat_history` holds one `StepRecord` per step: the distillation loss (mean over the
# step's micro-batches), the learning rate, and the held-out perplexity where it was measured
# (step 0: the ptq model it started from).

# %%
history = trained.qat_history
steps = [r.step for r in history if r.loss is not None]
losses = [r.loss for r in history if r.loss is not None]
smooth = [sum(losses[max(0, i - 7):i + 1]) / len(losses[max(0, i - 7):i + 1]) for i in range(len(losses))]
evaluated = [(r.step, r.perplexity) for r in history if r.perplexity is not None]
fig, (left, right) = plt.subplots(1, 2)
left.plot(steps, losses, color="0.75", label="per step")
left.plot(steps, smooth, label="mean of 8 steps")
left.set(xlabel="step", ylabel="KL to the float model", title="distillation loss")
left.legend()
right.plot(*zip(*evaluated), marker="o", label="qat")
right.axhline(float_ppl, color="k", linestyle=":", label="float")
right.axhline(history[0].perplexity, color="C1", linestyle="--", label="ptq")
right.set(xlabel="step", ylabel="perplexity", title="held-out perplexity")
right.legend()
fig.tight_layout()

# %% [markdown]
# ## The result is an ordinary converted model
#
# Training changed float weights that the layers' quantizers round as before, so the trained model
# packs (`pack_model`), saves (`groupquant.save`) and exports to ONNX like any converted model, and
# computes the same logits packed as in fake quantization.

# %%
ids = held_out[:32][None]
packed = gq.pack_model(copy.deepcopy(trained)).eval()
with torch.no_grad():
    print("packed logits equal the fake-quant logits:", torch.equal(packed(ids).logits, trained.eval()(ids).logits))
