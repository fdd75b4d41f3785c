# %% [markdown]
# # Quantization-aware training with `QuantLinear`
#
# A small network on real data (scikit-learn's handwritten digits, which ship inside
# scikit-learn: no download), in four steps:
#
# 1. train a float model;
# 2. post-training quantize (PTQ) it to every MX format, weights and activations;
# 3. take the weakest format, MXFP4 (4 bits + 8/32 for the scale), and fine-tune it with
#    quantization-aware training (QAT): the forward pass sees quantized weights and inputs, the
#    backward pass lets gradients through (straight-through estimator) to the float weights;
# 4. look at what is stored: quant tensors, packed bytes.

# %%
import copy
import sys

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

import groupquant as gq
from groupquant.demo import load_digits_split
from groupquant.export import packed_state_dict
from groupquant.nn import QuantLinear
from groupquant.quantizers import (MXFloat4e2m1Act, MXFloat4e2m1Weight, MXFloat6e2m3Act, MXFloat6e2m3Weight,
                                   MXFloat6e3m2Act, MXFloat6e3m2Weight, MXFloat8e4m3Act, MXFloat8e4m3Weight,
                                   MXFloat8e5m2Act, MXFloat8e5m2Weight, MXInt8Act, MXInt8Weight)

torch.set_num_threads(1)  # a tiny model: one thread is the fastest, and steady on a busy machine
plt.rcParams.update({"figure.dpi": 60, "figure.figsize": (7, 2.6), "font.size": 10})
_ = torch.manual_seed(0)

# %% [markdown]
# ## The data
#
# 1797 images of 8x8 pixels; a quarter is held out for testing. Pixels are standardized with the
# training set's statistics.

# %%
data = load_digits_split(seed=0, test_fraction=0.25)
print("train", tuple(data.x_train.shape), "test", tuple(data.x_test.shape))
fig, axes = plt.subplots(1, 10, figsize=(7, 0.9))
for ax, img, label in zip(axes, data.x_train[:10], data.y_train[:10]):
    ax.imshow(img.view(8, 8).numpy(), cmap="gray_r")
    ax.set_title(int(label), fontsize=9)
    ax.axis("off")
plt.show()

# %% [markdown]
# ## A float model and a training loop
#
# One loop serves both the float training and QAT. It records the training loss and the test
# loss of every epoch, and shows a progress bar.

# %%
def evaluate(model):
    """Test accuracy (fraction) and test loss (cross-entropy, nats)."""
    model.eval()
    with torch.no_grad():
        logits = model(data.x_test)
    return (logits.argmax(1) == data.y_test).float().mean().item(), F.cross_entropy(logits, data.y_test).item()


def fit(model, epochs, lr, desc, batch_size=64, seed=0):
    """AdamW on shuffled mini-batches; returns per-epoch (train loss, test loss)."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    n = len(data.y_train)
    curve = {"train": [], "test": []}
    bar = tqdm(range(epochs), desc=desc, file=sys.stdout, ncols=80,
               bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} epochs{postfix}")
    for _ in bar:
        model.train()
        order, total = torch.randperm(n, generator=gen), 0.0
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        curve["train"].append(total / n)
        curve["test"].append(evaluate(model)[1])
        bar.set_postfix(train=f"{curve['train'][-1]:.4f}", test=f"{curve['test'][-1]:.4f}")
    return curve


float_model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
float_curve = fit(float_model, epochs=15, lr=3e-3, desc="float")
float_acc, float_loss = evaluate(float_model)
print(f"float32: test accuracy {float_acc:.1%}, test loss {float_loss:.4f}")

# %% [markdown]
# ## Post-training quantization to every MX format
#
# `gq.quantize_model` swaps each `nn.Linear` for a `QuantLinear` with the given quantizers,
# keeping the trained weights. The default MX quantizers group 32 values along the input features
# and use E8M0 power-of-two scales, as the OCP MX v1.0 spec does; here both the weights and each
# layer's input are quantized.

# %%
MX = {
    "MXINT8": (MXInt8Weight, MXInt8Act, 8),
    "MXFP8 E4M3": (MXFloat8e4m3Weight, MXFloat8e4m3Act, 8),
    "MXFP8 E5M2": (MXFloat8e5m2Weight, MXFloat8e5m2Act, 8),
    "MXFP6 E3M2": (MXFloat6e3m2Weight, MXFloat6e3m2Act, 6),
    "MXFP6 E2M3": (MXFloat6e2m3Weight, MXFloat6e2m3Act, 6),
    "MXFP4 E2M1": (MXFloat4e2m1Weight, MXFloat4e2m1Act, 4),
}
ptq = {}
print(f"{'format':<11} {'bits/elem':>9} {'test acc':>8} {'test loss':>9}")
print(f"{'float32':<11} {32:>9} {float_acc:>8.1%} {float_loss:>9.4f}")
for name, (wq, aq, bits) in MX.items():
    model = gq.quantize_model(copy.deepcopy(float_model), weight_quant=wq, input_quant=aq)
    ptq[name] = evaluate(model)
    print(f"{name:<11} {bits + 8 / 32:>9.2f} {ptq[name][0]:>8.1%} {ptq[name][1]:>9.4f}")
print(model[0])  # the first layer of the last (MXFP4) model

# %% [markdown]
# Eight-bit and six-bit formats cost almost nothing on this task; MXFP4, with 15 values per
# element and one scale per 32, loses the most. QAT fine-tunes the MXFP4 model from the float
# weights for a few epochs at a lower learning rate.

# %%
qat_model = gq.quantize_model(copy.deepcopy(float_model), weight_quant=MXFloat4e2m1Weight,
                              input_quant=MXFloat4e2m1Act)
qat_curve = fit(qat_model, epochs=6, lr=5e-4, desc="QAT MXFP4", seed=1)
qat_acc, qat_loss = evaluate(qat_model)
print(f"MXFP4 test accuracy: PTQ {ptq['MXFP4 E2M1'][0]:.1%} -> QAT {qat_acc:.1%}  (float {float_acc:.1%})")
print(f"MXFP4 test loss:     PTQ {ptq['MXFP4 E2M1'][1]:.4f} -> QAT {qat_loss:.4f}  (float {float_loss:.4f})")

# %%
fig, axes = plt.subplots(1, 2, figsize=(8, 2.6))
axes[0].plot(range(1, 16), float_curve["train"], label="train")
axes[0].plot(range(1, 16), float_curve["test"], label="test")
axes[0].set_yscale("log")
axes[0].set_title("float training")
axes[1].plot(range(0, 7), [ptq["MXFP4 E2M1"][1]] + qat_curve["test"], marker="o", label="MXFP4 test (0 = PTQ)")
axes[1].axhline(float_loss, color="gray", linestyle="--", label="float test")
axes[1].set_title("QAT of MXFP4")
for ax in axes:
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss (nats)")
    ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## What the quantized layer holds
#
# `quant_weight()` returns a quant tensor: it behaves like its dequantized value in torch code,
# and keeps the group layout contracted: `value_` is `[out, blocks, 32]`, `scale_` one power of
# two per block. `packed_state_dict` stores each weight in its real bits.

# %%
layer = qat_model[0]
with torch.no_grad():
    qw = layer.quant_weight()
print(type(qw).__name__, "value_", tuple(qw.value_.shape), "scale_", tuple(qw.scale_.shape))
print("distinct scales in layer 0:", sorted({float(s) for s in qw.scale_.flatten()})[:6], "...")
print("distinct element values:", sorted({float(v) for v in (qw.value_ / qw.scale_ + 0.0).flatten()}))

sd = packed_state_dict(qat_model)
packed = sum(gq.PackedTensor.from_record(r).nbytes for r in sd["packed"].values())
floats = sum(p.numel() * 4 for n, p in float_model.named_parameters() if n.endswith("weight"))
print(f"weights: {floats} bytes in float32 -> {packed} bytes packed ({packed / floats:.4f} = 4.25 / 32)")
