# %% [markdown]
# # Exploring the MX formats
#
# The OCP Microscaling (MX) formats store a block of 32 numbers as 32 narrow *elements* plus one
# shared 8-bit power-of-two *scale* (E8M0). This notebook looks at what that costs in accuracy:
#
# 1. the value grid of each element format, and the storage cost per element including the scale;
# 2. quantization error (SQNR, in dB) on Gaussian, Laplacian and heavy-tailed data and on the
#    weights of a small network trained on real data (scikit-learn's digits);
# 3. how the error moves with the block size, the scale rule and the rounding rule;
# 4. what the per-element errors look like;
# 5. scale formats beyond E8M0: NVFP4 (E4M3 block scales and a per-tensor scale) against MXFP4.
#
# Everything here uses three functions: `groupquant.fake_quant` (quantize and dequantize),
# `groupquant.quantize` (codes and scales) and `groupquant.get_format` (a format's constants).

# %%
import math

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

import groupquant as gq

plt.rcParams.update({"figure.dpi": 60, "figure.figsize": (7, 2.6), "font.size": 10})
torch.set_num_threads(1)  # small tensors: one thread is fast enough, and steady on a busy machine
_ = torch.manual_seed(0)


def sqnr_db(x: torch.Tensor, y: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio of y as an approximation of x, in dB."""
    noise = (x.double() - y.double()).pow(2).sum()
    return float(10 * torch.log10(x.double().pow(2).sum() / noise)) if noise > 0 else math.inf


def table(header, rows) -> None:
    """Show rows as a markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    display(Markdown("\n".join(lines)))


FORMATS = gq.MX_FORMATS
print(FORMATS)

# %% [markdown]
# ## 1. The formats
#
# Each element format is a small dataclass; every constant is derived from its widths.
# Storage per element is the element's bits plus the scale's 8 bits shared by the block:
# MXFP4 costs 4 + 8/32 = 4.25 bits per element.

# %%
rows = []
for name in FORMATS:
    f = gq.get_format(name)
    d = f.describe()
    rows.append([name, f.bit_width, f"{f.bit_width + 8 / 32:.2f}", f"{f.bit_width + 8 / 16:.2f}",
                 d["emax"], f"{f.max_normal:g}", f"{f.min_subnormal:g}", len(f.values()), d["specials"]])
table(["format", "element bits", "bits/elem (block 32)", "bits/elem (block 16)", "emax", "max normal",
       "min subnormal", "finite values", "specials"], rows)

# %% [markdown]
# The value grids, positive half, on a log2 axis: floats put the same number of values in every
# binade (octave); MXINT8 is evenly spaced, so it is dense at the top and sparse near zero.
# The shared scale slides the whole grid so that the block's largest magnitude lands in the top binade.

# %%
fig, ax = plt.subplots(figsize=(7, 2.8))
for row, name in enumerate(FORMATS):
    v = gq.get_format(name).values()
    v = v[v > 0]
    ax.plot(torch.log2(v), [row] * len(v), "|", markersize=9)
    ax.text(torch.log2(v).max().item() + 0.3, row, f"{len(v)} values", va="center", fontsize=8)
ax.set_yticks(range(len(FORMATS)), FORMATS)
ax.set_xlabel("log2(value)")
ax.set_xlim(-18, 22)
ax.set_title("positive values of each element format")
plt.show()

# %% [markdown]
# ## 2. Error on synthetic and real data
#
# Three synthetic tensors of 256 x 1024 values (blocks of 32 run along the last dim):
# Gaussian, Laplacian (heavier tails), and Student-t with 3 degrees of freedom (heavy-tailed: a few
# values are far larger than the rest). The real weights come from a small MLP trained for a few
# seconds on scikit-learn's digits, which ship inside scikit-learn (no download).

# %%
from groupquant.demo import TrainConfig, build_mlp, load_digits_split, train_classifier

digits = load_digits_split(seed=0)
mlp = build_mlp(64, (256, 256), 10, seed=0)
history = train_classifier(mlp, digits.x_train, digits.y_train, TrainConfig(epochs=8, progress=False))
print(f"trained: final epoch loss {history.epoch_loss[-1]:.4f}")

shape = (256, 1024)
data = {
    "gaussian": torch.randn(shape),
    "laplacian": torch.distributions.Laplace(0.0, 1.0).sample(shape),
    "student-t (3)": torch.distributions.StudentT(3.0).sample(shape),
    "MLP weights": mlp[2].weight.detach().clone(),  # the 256 x 256 hidden layer
}
for k, v in data.items():
    print(f"{k:>14}: shape {tuple(v.shape)}, max|x| / std = {float(v.abs().max() / v.std()):.1f}")

# %%
results = {name: {k: sqnr_db(x, gq.fake_quant(x, name)) for k, x in data.items()} for name in FORMATS}
table(["format"] + [f"{k} (dB)" for k in data],
      [[name] + [f"{results[name][k]:.1f}" for k in data] for name in FORMATS])

# %%
fig, ax = plt.subplots()
width = 0.8 / len(data)
for i, k in enumerate(data):
    ax.bar([j + i * width for j in range(len(FORMATS))], [results[n][k] for n in FORMATS], width, label=k)
ax.set_xticks([j + 0.4 - width / 2 for j in range(len(FORMATS))], FORMATS)
ax.set_ylabel("SQNR (dB)")
ax.legend(fontsize=8, ncol=2)
ax.set_title("MX quantization error, blocks of 32")
plt.show()

# %% [markdown]
# Reading the table: each extra mantissa bit is worth about 6 dB, so FP8 E5M2 and FP6 E3M2
# (both 2 mantissa bits) land on almost the same SQNR; the extra exponent bits only help data
# with a wider range *inside one block*. MXINT8 wins on smooth data: with a power-of-two scale
# it is a 1.6 fixed-point grid, finer than any 8-bit float at the top of the block.

# %% [markdown]
# ## 3. Block size, scale rule, rounding rule
#
# `block_size` may be any positive number, or `None` for one scale per whole row. Smaller blocks
# follow the data more closely at the cost of more scale bits (8 / block_size per element).

# %%
block_sizes = [8, 16, 32, 64, 128, 256, None]
labels = [str(b) if b else "row" for b in block_sizes]
fig, axes = plt.subplots(1, 2, figsize=(8, 2.8), sharey=True)
for ax, k in zip(axes, ["gaussian", "student-t (3)"]):
    for name in FORMATS:
        ax.plot(labels, [sqnr_db(data[k], gq.fake_quant(data[k], name, block_size=b)) for b in block_sizes],
                marker="o", label=name)
    ax.set_title(k)
    ax.set_xlabel("block size")
axes[0].set_ylabel("SQNR (dB)")
axes[1].legend(fontsize=7, loc="lower left")
plt.show()

# %% [markdown]
# The scale rule picks the block's power-of-two exponent from its largest magnitude `amax`:
#
# * `floor` (the OCP default): `2**(floor(log2 amax) - emax)`; the largest values may saturate
#   to max normal (e.g. for FP4, amax = 7.9 in the top binade saturates to 6);
# * `ceil`: one binade higher whenever amax is not a power of two: no saturation, coarser grid;
# * `even`: round amax to the element's mantissa first, then floor;
# * `rceil`: the smallest power of two that avoids saturation (`ceil(log2(amax / max_normal))`).
#
# Rounding of the elements: `even` (nearest, ties to even; OCP), `nearest` (ties away from zero),
# `floor` (toward zero) and `stochastic` (unbiased on average, noisier per value).

# %%
modes = ["floor", "ceil", "even", "rceil"]
x = data["gaussian"]
table(["format"] + [f"scale {m}" for m in modes],
      [[name] + [f"{sqnr_db(x, gq.fake_quant(x, name, scale_mode=m)):.2f}" for m in modes] for name in FORMATS])
roundings = ["even", "nearest", "floor", "stochastic"]
table(["format"] + [f"round {r}" for r in roundings],
      [[name] + [f"{sqnr_db(x, gq.fake_quant(x, name, rounding=r, seed=0)):.2f}" for r in roundings]
       for name in FORMATS])

# %% [markdown]
# Stochastic rounding loses about 3 dB per value but is unbiased: averaged over many draws it
# recovers the input, which is why it is used for gradients.

# %%
v = torch.full((1, 32), 0.3)
v[0, 0] = 6.0  # fixes the scale at 1: elements near 0.3 fall between the FP4 values 0 and 0.5
draws = torch.stack([gq.fake_quant(v, "fp4_e2m1", rounding="stochastic", seed=s) for s in range(2000)])
print("round to nearest:", gq.fake_quant(v, "fp4_e2m1")[0, 1].item(),
      "| stochastic mean of 2000 draws:", round(draws[:, 0, 1:].mean().item(), 3))

# %% [markdown]
# ## 4. Per-element errors
#
# Errors measured in units of each block's scale: `(x - q(x)) / scale`. On a float grid the step
# doubles with each binade, so the largest in-grid errors are half a step of the top binade
# (FP4: step 2 between 4 and 6, error up to 1). The `floor` scale rule adds the tails: a block's
# largest values, scaled into the top binade, can exceed max normal and saturate (FP4: up to
# 7.99 -> 6; FP8 E4M3: up to 511.9 -> 448, 64 scale units).

# %%
fig, axes = plt.subplots(1, 3, figsize=(9, 2.5))
for ax, name in zip(axes, ["fp8_e4m3", "fp6_e2m3", "fp4_e2m1"]):
    q = gq.quantize(x, name)
    scale = q.layout.expand(q.scale.expand_as(q.element_values()))
    err = ((x - q.dequantize()) / scale).flatten()
    ax.hist(err.numpy(), bins=80, log=True)
    ax.set_title(f"{name}: max {err.abs().max():.2f}")
    ax.set_xlabel("error / block scale")
plt.tight_layout()
plt.show()

# %% [markdown]
# A quantized tensor keeps the contracted layout: codes `[rows, blocks, 32]` and one scale byte
# per block, so the storage is easy to count.

# %%
q = gq.quantize(data["MLP weights"], "fp4_e2m1")
print("codes", tuple(q.codes.shape), q.codes.dtype, "| scale codes", tuple(q.scale_codes.shape), q.scale_codes.dtype)
bits = q.codes.numel() * 4 + q.scale_codes.numel() * 8
print(f"{bits / 8:.0f} bytes packed = {bits / q.codes.numel():.2f} bits per element "
      f"(float32: {q.codes.numel() * 4} bytes)")

# %% [markdown]
# ## 5. Scales beyond E8M0: NVFP4
#
# The scale's own number format is a setting too. NVIDIA's NVFP4 keeps FP4 E2M1 elements but
# shares a scale over blocks of 16, stores it as an unsigned FP8 E4M3 number (3 mantissa bits:
# the scale follows amax within a binade, not just to the next power of two), and adds one float32
# scale per tensor, `g = amax / (448 * 6)`, so that the E4M3 block scales use their range well:
# 4 + 8/16 = 4.5 bits per element. Three FP4 variants at block 16:
#
# * MXFP4: E8M0 (power-of-two) scales, `fake_quant(x, "fp4_e2m1", block_size=16)`;
# * MXFP4 with E4M3 scales, no tensor scale: `fake_quant(x, "nvfp4", tensor_scale=False)`;
# * NVFP4: E4M3 scales and the per-tensor scale: `fake_quant(x, "nvfp4")`.
#
# The scale format can be anything else as well: `scale_format="e5m0"` (a 5-bit shared
# exponent, as microxcaling's `scale_bits`), `"bfloat16"`, `"float32"`, or another unsigned minifloat `"ue5m3"`.

# %%
variants = {
    "MXFP4 (E8M0, block 16)": dict(fmt="fp4_e2m1", block_size=16),
    "MXFP4 + E4M3 scales": dict(fmt="nvfp4", tensor_scale=False),
    "NVFP4 (E4M3 + FP32 tensor scale)": dict(fmt="nvfp4"),
}
table(["variant"] + [f"{k} (dB)" for k in data],
      [[v] + [f"{sqnr_db(x, gq.fake_quant(x, **kw)):.2f}" for x in data.values()] for v, kw in variants.items()])

# %% [markdown]
# The E4M3 scale gains over E8M0 because a power-of-two scale wastes up to a binade: a block whose
# amax is 7.9 / 2 = 3.95 in units of the scale uses only the lower part of FP4's grid (max 6). The
# tensor scale matters when the data's range does not fit E4M3's own (2^-6 .. 448, about 17
# binades): scaled far down, the block scales of single-level E4M3 fall under its smallest
# normal and are clamped there, and the small blocks lose their precision.

# %%
tiny = data["gaussian"] * 2.0 ** -12  # a tensor far below E4M3's range of scales
wide = data["gaussian"] * torch.exp2(torch.linspace(-10, 10, 256)).unsqueeze(1)  # rows over 20 binades
table(["variant", "x 2^-12 (dB)", "rows over 20 binades (dB)"],
      [[v, f"{sqnr_db(tiny, gq.fake_quant(tiny, **kw)):.2f}", f"{sqnr_db(wide, gq.fake_quant(wide, **kw)):.2f}"]
       for v, kw in variants.items()])

# %% [markdown]
# `groupquant.quantize(x, "nvfp4")` gives the storage: FP4 codes, one E4M3 byte per block of 16
# and the float32 tensor scale; `dequantize()` computes `(q * s) * g`, bit for bit what
# `fake_quant` returns.

# %%
q = gq.quantize(data["MLP weights"], "nvfp4")
print("codes", tuple(q.codes.shape), "| scale bytes", tuple(q.scale_codes.shape), q.scale_codes.dtype,
      "| tensor scale", float(q.tensor_scale))
print("dequantize() == fake_quant:", torch.equal(q.dequantize(), gq.fake_quant(data["MLP weights"], "nvfp4")))
print(f"bits per element: {gq.NVFP4.bits_per_element} (+ 32 bits per tensor)")
