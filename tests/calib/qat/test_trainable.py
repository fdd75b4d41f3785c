"""Which parameters train: parts, defaults, explicit parts the model lacks, requires_grad restored."""
from __future__ import annotations

import pytest
import torch

import groupquant as gq
from groupquant.nn import RECIPES
from groupquant.quantizers import LearnedScaling, MXFloat4e2m1Weight
from groupquant.calib.qat.trainable import PARTS, frozen_except, parameter_parts, select_trainable


class LearnedMXFP4Weight(LearnedScaling, MXFloat4e2m1Weight):
    """MXFP4 weights with learned E8M0 group scales."""


def _converted(tiny_lm, recipe="mxfp4_weight_only"):
    return gq.quantize_model(tiny_lm(layers=1).model, recipe=recipe, quantize_head=False)


def test_every_parameter_has_one_part_and_the_parts_are_what_they_say(tiny_lm):
    model = _converted(tiny_lm)
    parts = parameter_parts(model)
    names = [n for part in PARTS for n, _ in parts[part]]
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())  # each once (the tied head once)
    assert [n for n, _ in parts["head"]] == ["lm_head.weight"] or [n for n, _ in parts["head"]] == [
        "model.embed_tokens.weight"]
    assert all("norm" in n for n, _ in parts["norms"]) and len(parts["norms"]) == 3
    assert all(n.endswith("_proj.weight") for n, _ in parts["weights"]) and len(parts["weights"]) == 7
    assert parts["scales"] == [] and parts["rotations"] == []


def test_default_trains_weights_and_norms_and_freezes_embeddings_and_head(tiny_lm):
    model = _converted(tiny_lm)
    chosen = select_trainable(model)
    assert set(chosen.parts) == {"weights", "norms"}
    frozen = {id(p) for part in ("head", "embeddings") for _, p in parameter_parts(model)[part]}
    assert frozen and not frozen & {id(p) for p in chosen.parameters()}


def test_learned_scales_train_when_the_recipe_has_them(tiny_lm):
    recipe = RECIPES["mxfp4_weight_only"].replace(name="learned", weight_quant=LearnedMXFP4Weight)
    model = gq.quantize_model(tiny_lm(layers=1).model, recipe=recipe, quantize_head=False)
    chosen = select_trainable(model, ["scales"])
    assert len(chosen.parts["scales"]) == 7
    assert all(n.endswith("learned_scale") for n, _ in chosen.named())
    assert set(select_trainable(model).parts) == {"weights", "norms", "scales"}


def test_parts_named_but_missing_and_unknown_parts_are_errors(tiny_lm):
    model = _converted(tiny_lm)
    with pytest.raises(ValueError, match="names 'scales', but the model has no learned scales"):
        select_trainable(model, ["weights", "scales"])
    with pytest.raises(ValueError, match="names 'rotations', but the model has no rotation parameters"):
        select_trainable(model, "rotations")
    with pytest.raises(ValueError, match="unknown part 'weight'; did you mean 'weights'"):
        select_trainable(model, ["weight"])
    with pytest.raises(ValueError, match="is empty"):
        select_trainable(model, [])


def test_frozen_except_gives_requires_grad_back(tiny_lm):
    model = _converted(tiny_lm)
    model.model.norm.weight.requires_grad_(False)
    before = {n: p.requires_grad for n, p in model.named_parameters()}
    chosen = select_trainable(model, ["norms", "embeddings"])
    with frozen_except(model, chosen):
        on = {n for n, p in model.named_parameters() if p.requires_grad}
        assert on == {n for n, _ in chosen.named()}
        assert "model.layers.0.self_attn.q_proj.weight" not in on
    assert {n: p.requires_grad for n, p in model.named_parameters()} == before
