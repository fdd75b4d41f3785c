# %% [markdown]
# # Declaring your own quantizers
#
# A quantizer in groupquant is a class of *settings*: widths, scaling granularity, group size,
# scale rule, rounding. Everything else (bias, emax, max normal, NaN/Inf codes, which modules to
# build) is *derived* from them when a layer builds the quantizer. So a new format is a subclass
# that changes a few numbers. This notebook shows:
#
# 1. subclassing a default MX quantizer to change the widths, and what `describe()` prints;
# 2. per-layer overrides through layer keywords (`weight_group_size=16`);
# 3. a group-wise INT4 weight quantizer with float (not power-of-two) scales;
# 4. a quantizer that learns its scales;
# 5. what happens when a setting is wrong.

# %%
import torch
import torch.nn.functional as F

import groupquant as gq
from groupquant.nn import QuantLinear
from groupquant.quantizers import (Int4WeightPerGroupFloat, LearnedScaling, MXFloat4e2m1Weight,
                                   MXFloat8e4m3Act, MXFloat8e4m3Weight)

torch.set_num_threads(1)
_ = torch.manual_seed(0)


def sqnr_db(x, y):
    """Signal-to-quantization-noise ratio in dB."""
    return float(10 * torch.log10(x.pow(2).sum() / (x - y).pow(2).sum()))

# %% [markdown]
# ## 1. Subclass a default to change the widths
#
# `MXFloat8e4m3Weight` is MXFP8 E4M3. Changing three numbers gives OCP's FP6 E2M3: the bias,
# the largest value (7.5) and the absence of NaN/Inf codes follow from the widths by the OCP rules.

# %%
class MyFP6(MXFloat8e4m3Weight):
    bit_width = 6
    exponent_bit_width = 2
    mantissa_bit_width = 3


print(gq.describe(MyFP6))

# %% [markdown]
# The layer built from it computes exactly the same values as the functional API with the
# `fp6_e2m3` format (blocks of 32 along the input features):

# %%
layer = QuantLinear(256, 64, weight_quant=MyFP6)
with torch.no_grad():
    w_q = gq.quant_tensor.plain(layer.quant_weight())
print("equal to gq.fake_quant(W, 'fp6_e2m3'):", torch.equal(w_q, gq.fake_quant(layer.weight.detach(), "fp6_e2m3")))
print(f"weight SQNR: {sqnr_db(layer.weight.detach(), w_q):.1f} dB")

# %% [markdown]
# Without a class body, `let` derives a variant; unknown names are refused.

# %%
FP4Block16 = MXFloat4e2m1Weight.let(group_size=16)
settings = gq.describe(FP4Block16)
print({k: settings[k] for k in ("format_name", "group_size", "max_normal", "scale_rounding")})

# %% [markdown]
# ## 2. Per-layer overrides through layer keywords
#
# A keyword with a quantizer's prefix (`weight_`, `input_`, `output_`, `bias_`) reaches that
# quantizer's setting for this layer only. The class itself is untouched.

# %%
first = QuantLinear(256, 64, weight_quant=MXFloat4e2m1Weight, input_quant=MXFloat8e4m3Act,
                    weight_group_size=16, input_scale_rounding="even")
other = QuantLinear(256, 64, weight_quant=MXFloat4e2m1Weight, input_quant=MXFloat8e4m3Act)
for name, lay in [("first", first), ("other", other)]:
    w, a = gq.describe(lay.weight_quant), gq.describe(lay.input_quant)
    print(f"{name}: weight group_size={w['group_size']}, input scale_rounding={str(a['scale_rounding'])}")
# Gaussian weights (the default uniform initialisation puts nearly every block's largest value in
# the same binade, so blocks of 16 and 32 would get the same scales)
w = torch.randn(64, 256)
with torch.no_grad():
    first.weight.copy_(w)
    other.weight.copy_(w)
    print(f"weight SQNR, blocks of 16: {sqnr_db(w, gq.quant_tensor.plain(first.quant_weight())):.2f} dB, "
          f"blocks of 32: {sqnr_db(w, gq.quant_tensor.plain(other.quant_weight())):.2f} dB")

# %% [markdown]
# Smaller blocks are not automatically better for MXFP4 with the OCP `floor` scale rule: each
# block's largest value is scaled into [4, 8) and saturates to 6 when it lands above 6, and with
# fewer elements per block, block maxima are a larger share of all elements. With the `even` or
# `rceil` rule (nothing saturates, or rounding first), blocks of 16 do beat blocks of 32:

# %%
for rule in ("floor", "even", "rceil"):
    q16 = gq.fake_quant(w, "fp4_e2m1", block_size=16, scale_mode=rule)
    q32 = gq.fake_quant(w, "fp4_e2m1", block_size=32, scale_mode=rule)
    print(f"scale rule {rule:<6}: blocks of 16 {sqnr_db(w, q16):.2f} dB, blocks of 32 {sqnr_db(w, q32):.2f} dB")

# %% [markdown]
# Settings are resolved in this order, later wins: the quantizer's base classes, the class body
# (or `let`), then the layer keywords. `gq.describe(layer.weight_quant)` prints what a layer
# actually uses.

# %% [markdown]
# ## 3. Group-wise INT4 weights with float scales
#
# `Int4WeightPerGroupFloat` is the common "W4 group-wise" scheme: integer codes in [-7, 7], one
# float32 scale (`amax / max`) per group of 128. Declare a group of 32 to compare it with MXFP4
# at the same block size: a float scale costs 32 bits per block instead of 8.

# %%
class Int4Group32(Int4WeightPerGroupFloat):
    group_size = 32


x = torch.randn(512, 512)
rows = [("MXFP4 (E8M0 scale)", MXFloat4e2m1Weight, 4 + 8 / 32),
        ("INT4, float scale, group 32", Int4Group32, 4 + 32 / 32),
        ("INT4, float scale, group 128", Int4WeightPerGroupFloat, 4 + 32 / 128)]
print(f"{'quantizer':<30} {'bits/elem':>9} {'SQNR dB':>8}")
for name, q, bits in rows:
    lay = QuantLinear(512, 512, bias=False, weight_quant=q)
    with torch.no_grad():
        lay.weight.copy_(x)
        print(f"{name:<30} {bits:>9.2f} {sqnr_db(x, gq.quant_tensor.plain(lay.quant_weight())):>8.2f}")
s = gq.describe(Int4WeightPerGroupFloat)
print("scale rule:", s["scale_rule"])

# %% [markdown]
# ## 4. Learned scales
#
# Mixing `LearnedScaling` in first turns the per-group scale into an `nn.Parameter`, initialised
# from the statistics of the weight at the first call. For MX quantizers the learned value is the
# E8M0 exponent, kept a power of two in the forward pass; gradients reach it and the weight.

# %%
class LearnedFP4(LearnedScaling, MXFloat4e2m1Weight):
    pass


lay = QuantLinear(64, 16, weight_quant=LearnedFP4)
print([(n, tuple(p.shape)) for n, p in lay.named_parameters()])
xb, target = torch.randn(32, 64), torch.randn(32, 16)
opt = torch.optim.Adam(lay.parameters(), lr=1e-2)
scale_param = dict(lay.named_parameters())["weight_quant.tensor_quant.scale_impl.learned_scale"]
before = scale_param.detach().clone()
losses = []
for step in range(30):
    loss = F.mse_loss(lay(xb), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; scale parameters changed in "
      f"{int((scale_param.detach() != before).sum())} of {before.numel()} groups")

# %% [markdown]
# ## 5. When a setting is wrong
#
# Mistakes fail when the quantizer is built, with an error that names the setting.

# %%
def show_error(title, build):
    try:
        build()
        print(f"{title}: no error")
    except (ValueError, TypeError) as e:
        print(f"{title}:\n    {type(e).__name__}: {e}")


show_error("a misspelled keyword",
           lambda: QuantLinear(64, 16, weight_quant=MXFloat4e2m1Weight, weight_bitwidth=4))
show_error("widths that do not add up",
           lambda: QuantLinear(64, 16, weight_quant=MXFloat4e2m1Weight, weight_bit_width=5))
show_error("a group size of zero",
           lambda: QuantLinear(64, 16, weight_quant=MXFloat4e2m1Weight, weight_group_size=0))
show_error("an unknown scale rule",
           lambda: QuantLinear(64, 16, weight_quant=MXFloat4e2m1Weight, weight_scale_rounding="up"))
show_error("setting a derived value",
           lambda: QuantLinear(64, 16, weight_quant=MXFloat4e2m1Weight.let(max_normal=8.0)))
show_error("an unknown format in the functional API", lambda: gq.fake_quant(torch.randn(4, 32), "fp5_e2m2"))
show_error("a float64 tensor", lambda: gq.fake_quant(torch.randn(4, 32, dtype=torch.float64), "fp4_e2m1"))
