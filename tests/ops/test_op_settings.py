"""OpSettings: the one record of a group op's settings. The functional ops build it from their
keywords (checked once, errors naming the keyword), a resolved quantizer spec returns it
(QuantSpec.op_settings, no second check), and both give the same bits as the functional call."""
import pytest
import torch

import groupquant as gq
import groupquant.quantizers as Q
from groupquant.formats import E8M0, UE4M3, get_format
from groupquant.ops import OpSettings, fake_quant_spec_with_scale, make_spec, op_settings, quantize_spec
from groupquant.quantizers import quantizer_spec

KEYWORDS = dict(block_size="auto", dim=-1, rounding="even", scale_mode=None, saturating=True, scale_format=None,
                tensor_scale=None)


def test_keywords_resolve_the_scheme_and_the_scale_rule():
    mx = op_settings("fp4_e2m1", **KEYWORDS)
    assert mx == OpSettings(fmt=get_format("fp4_e2m1"), block_size=32, dim=-1, rounding="even", scale_rule="floor",
                            saturating=True, scale_format=E8M0, tensor_scale=False)
    nv = op_settings("nvfp4", **KEYWORDS)
    assert (nv.fmt, nv.block_size, nv.scale_rule, nv.scale_format, nv.tensor_scale) == (
        get_format("fp4_e2m1"), 16, "float", UE4M3, True)


@pytest.mark.parametrize("change,name", [(dict(rounding="up"), "rounding"), (dict(scale_mode="round"), "scale_mode"),
                                         (dict(scale_format="e8m0", scale_mode="float"), "scale_mode"),
                                         (dict(tensor_scale=True), "tensor_scale")])
def test_a_bad_keyword_is_named(change, name):
    with pytest.raises(ValueError, match=name):
        op_settings("fp8_e4m3", **dict(KEYWORDS, **change))


def test_make_spec_is_the_settings_and_the_tensors_layout():
    x = torch.randn(4, 70)
    spec = make_spec(x, "fp8_e4m3", 16, dim=1, scale_mode="ceil")
    settings = op_settings("fp8_e4m3", **dict(KEYWORDS, block_size=16, dim=1, scale_mode="ceil"))
    assert spec == settings.group_spec(x) and spec.seed is None
    assert (spec.layout.dim, spec.layout.block_size, spec.layout.shape) == (1, 16, (4, 70))


@pytest.mark.parametrize("quantizer,keywords", [
    (Q.MXFloat4e2m1Weight, dict(fmt="fp4_e2m1", block_size=32, dim=1)),
    (Q.MXFloat8e4m3Weight.let(scale_rounding="rceil", group_size=16), dict(fmt="fp8_e4m3", block_size=16, dim=1,
                                                                          scale_mode="rceil")),
    (Q.NVFP4Weight, dict(fmt="nvfp4", dim=1)),
    (Q.MXInt8Weight.let(float_to_int_rounding="nearest"), dict(fmt="int8", block_size=32, dim=1, rounding="nearest")),
])
def test_a_quantizer_spec_gives_the_settings_its_keywords_give(quantizer, keywords):
    """QuantSpec.op_settings (the quantizer's translation) against the functional keywords written
    by hand for the same quantizer, and the quantize op's bits through both records."""
    spec = quantizer_spec(quantizer).with_dims(1, 0)
    got = spec.op_settings(2)
    fmt = keywords.pop("fmt")
    want = op_settings(fmt, **dict(KEYWORDS, **keywords))
    assert got == want
    w = torch.randn(24, 96)
    q = quantize_spec(w, got.group_spec(w))
    ref = gq.quantize(w, fmt, **{k: v for k, v in keywords.items()})
    assert torch.equal(q.codes, ref.codes) and torch.equal(q.scale, ref.scale)


def test_channel_and_tensor_granularity_run_on_a_two_dim_view():
    """Per tensor: one block over the [1, N] view (dim 1); per channel of dim 0: [C, N] (dim 1); of
    another dim: [N, C] (dim 0); the block 0 is the whole dim."""
    per_tensor = quantizer_spec(Q.Int8WeightPerTensor)
    per_channel = quantizer_spec(Q.Int8WeightPerChannel)
    assert (per_tensor.op_settings(4).block_size, per_tensor.op_settings(4).dim) == (0, 1)
    channel_0, channel_2 = per_channel.with_dims(None, 0), per_channel.with_dims(None, 2)
    assert (channel_0.op_settings(3).dim, channel_2.op_settings(3).dim) == (1, 0)


def test_a_quantizer_is_not_checked_again_per_call(monkeypatch):
    """The scale set-up is checked when the quantizer resolves; quantizing tensors of new shapes
    runs no check of it."""
    layer = gq.nn.QuantLinear(64, 8, weight_quant=Q.NVFP4Weight, input_quant=Q.MXFloat8e4m3Act)
    calls = []
    import groupquant.formats.scale_setup as setup
    original = setup.check_scale_setup
    monkeypatch.setattr(setup, "check_scale_setup", lambda *a, **k: calls.append(1) or original(*a, **k))
    for rows in (1, 3, 5):
        layer(torch.randn(rows, 64))
    assert calls == []


def test_the_spec_route_keeps_stochastic_seeds_per_call():
    settings = op_settings("fp4_e2m1", **dict(KEYWORDS, rounding="stochastic"))
    x = torch.randn(8, 64)
    a, b = settings.group_spec(x, 7), settings.group_spec(x, 7)
    assert a.seed == b.seed == 7
    assert torch.equal(fake_quant_spec_with_scale(x, a).value, gq.fake_quant(x, "fp4_e2m1", rounding="stochastic",
                                                                               seed=7))
    assert settings.group_spec(x).seed is not None


def test_remembered_keywords_keep_their_types():
    """Keywords seen before give the remembered record; 1 is not True (typed), so a non-bool is
    still refused after True was seen."""
    first = op_settings("fp8_e5m2", **dict(KEYWORDS, saturating=False))
    assert op_settings("fp8_e5m2", **dict(KEYWORDS, saturating=False)) is first
    with pytest.raises(TypeError, match="saturating"):
        op_settings("fp8_e5m2", **dict(KEYWORDS, saturating=0))
