"""learn_rotations: the learned block rotations stay orthogonal (float64), keep the float function,
never do worse than the fixed Hadamard rotation on the calibration rows, refuse bad options by
name; through ptq; a learned layer survives state_dict, pack_model and safetensors, and the formats
whose readers would not apply it (compressed-tensors, GGUF, ONNX) refuse it."""
import copy

import pytest
import torch

import groupquant as gq
from groupquant.calib.float_check import MethodRefused
from groupquant.calib.learned_rotation import cayley, learn_rotations
from groupquant.calib.rotate import rotate_model
from groupquant.nn.layers.input_rotation import InputRotation, LearnedInputRotation
from groupquant.ops.hadamard import hadamard_matrix

from .tiny_models import ids, llama

transformers = pytest.importorskip("transformers")

ITEMS = [ids(seed=s) for s in (5, 6)]  # calibration items [2, 12]
PROBE = ids(seed=9)


def outlier_llama():
    """The tiny Llama with a few large input features in its embeddings (what block rotations are for)."""
    model = llama()
    with torch.no_grad():
        model.model.embed_tokens.weight[:, [3, 40]] *= 12.0
    return model


def rotated(recipe="mxfp4"):
    q = gq.quantize_model(outlier_llama(), recipe=recipe, functional=False, exclude=["lm_head"])
    rotate_model(q, exclude=["lm_head"])
    return q


def float_logits(model, x=PROBE):
    from groupquant.calib.float_check import float_output
    return float_output(model, x)


def layer_inputs(model):
    """Each quant linear's raw inputs (every token of ITEMS), captured here by hooks of our own."""
    found = {}
    handles = [m.register_forward_pre_hook(lambda m, a, n=n: found.setdefault(n, []).append(a[0].reshape(-1, a[0].shape[-1])))
               for n, m in model.named_modules() if isinstance(getattr(m, "input_rotation", None), InputRotation)]
    with torch.no_grad():
        for x in ITEMS:
            model(x)
    for h in handles:
        h.remove()
    return {n: torch.cat(v) for n, v in found.items()}


def deployed_error(layer, x, float_weight):
    """``mean((layer(x) - x W^T - b)^2)`` in float64, ``W`` the original (unrotated) weight."""
    with torch.no_grad():
        ref = x.double() @ float_weight.T + layer.bias.double() if layer.bias is not None else x.double() @ float_weight.T
        return float((layer(x).double() - ref).pow(2).mean())


def unrotated_weights(model):
    """Each rotated layer's weight in the original basis, float64 (``W M^T`` with ``M`` dense)."""
    out = {}
    for n, m in model.named_modules():
        rot = getattr(m, "input_rotation", None)
        if rot is None:
            continue
        k = m.in_features // rot.block_size
        blocks = rot.matrix.double() if isinstance(rot, LearnedInputRotation) else \
            hadamard_matrix(rot.block_size).expand(k, -1, -1)
        out[n] = m.weight.detach().double() @ torch.block_diag(*blocks).T
    return out


def test_cayley_is_orthogonal_in_float64():
    s = torch.randn(3, 16, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2
    r = cayley(s)
    eye = torch.eye(16, dtype=torch.float64)
    assert torch.allclose(r.transpose(-1, -2) @ r, eye.expand(3, -1, -1), atol=1e-12)
    assert (r - eye).abs().max() > 0.5  # a real rotation, not the identity
    assert torch.equal(cayley(torch.zeros(2, 4, 4, dtype=torch.float64)), torch.eye(4, dtype=torch.float64).expand(2, -1, -1))


def test_learned_rotations_are_orthogonal_exact_in_float_and_never_worse():
    q = rotated()
    before = float_logits(q)
    w_float = unrotated_weights(q)
    xs = layer_inputs(q)
    hadamard = {n: deployed_error(q.get_submodule(n), x, w_float[n]) for n, x in xs.items()}
    reports = learn_rotations(q, ITEMS, steps=15, lr=1e-2, rows=10_000)  # rows: every calibration token
    learned = {n: m for n, m in q.named_modules() if isinstance(getattr(m, "input_rotation", None), LearnedInputRotation)}
    assert len(learned) >= 4, [r.detail for r in reports]
    for n, m in learned.items():
        blocks = m.input_rotation.matrix.double()
        eye = torch.eye(blocks.shape[-1], dtype=torch.float64)
        assert torch.allclose(blocks.transpose(-1, -2) @ blocks, eye.expand_as(blocks), atol=1e-6)
        assert (blocks - hadamard_matrix(blocks.shape[-1])).abs().max() > 1e-3  # moved off the Hadamard start
    torch.testing.assert_close(float_logits(q), before, rtol=1e-4, atol=1e-4)  # the float function kept
    w_after = unrotated_weights(q)
    for n, x in xs.items():  # the same inputs: captured before any layer changed
        torch.testing.assert_close(w_after[n], w_float[n], rtol=1e-5, atol=1e-6)
        assert deployed_error(q.get_submodule(n), x, w_float[n]) <= hadamard[n] * (1 + 1e-6), n
    improved = [n for n in learned if deployed_error(q.get_submodule(n), xs[n], w_float[n]) < 0.99 * hadamard[n]]
    assert improved
    by_layer = {r.layer: r for r in reports}
    assert all(r.error_after <= r.error_before for r in reports)
    assert by_layer[improved[0]].error_after < by_layer[improved[0]].error_before


def test_bad_options_are_named():
    q = rotated()
    for kw, match in (({"steps": 0}, "steps must be at least 1"), ({"steps": 2.5}, "steps must be an int"),
                      ({"lr": -1.0}, "lr must be a finite number > 0"), ({"lr": float("nan")}, "lr must be"),
                      ({"lr": "fast"}, "lr must be a number"), ({"rows": 0}, "rows must be at least 1")):
        with pytest.raises((TypeError, ValueError), match=match):
            learn_rotations(q, ITEMS, **kw)
    with pytest.raises(ValueError, match="exclude='nothing' matches no module"):
        learn_rotations(q, ITEMS, exclude="nothing")
    plain = gq.quantize_model(llama(), recipe="mxfp4", functional=False, exclude=["lm_head"])
    with pytest.raises(MethodRefused, match="no quant linear layer has an online Hadamard rotation.*rotate_model first"):
        learn_rotations(plain, ITEMS)
    with pytest.raises(ValueError, match="'learn_rotations' learns the block rotations 'rotate' puts in"):
        gq.ptq(llama(), ITEMS, recipe="mxfp4", methods=["learn_rotations", "gptq"], progress=False)
    with pytest.raises(ValueError, match="'learn_rotations' has no option 'step'; options: steps, lr, rows"):
        gq.ptq(llama(), ITEMS, recipe="mxfp4", methods={"rotate": {}, "learn_rotations": {"step": 3}}, progress=False)


def test_through_ptq_with_options():
    model = outlier_llama()
    with torch.no_grad():
        ref = model(PROBE).logits.double()
    q = gq.ptq(model, ITEMS, recipe="mxfp4", progress=False, functional=False,
               methods={"smooth": {}, "rotate": {}, "learn_rotations": {"steps": 5, "lr": 1e-2}})
    rows = [r for r in q.calibration_report if r.method == "learn_rotations"]
    assert len(rows) == 14 and any("learned block rotation" in r.detail for r in rows)
    assert all("5 steps" in r.detail for r in rows)
    assert any(isinstance(m, LearnedInputRotation) for m in q.modules())
    torch.testing.assert_close(float_logits(q), ref, rtol=1e-3, atol=1e-3)  # (gptq would move the float weights)


def learned_model():
    q = rotated()
    learn_rotations(q, ITEMS, steps=5, lr=1e-2)
    assert any(isinstance(m, LearnedInputRotation) for m in q.modules())
    return q


def test_state_dict_and_pack_model_keep_the_learned_rotation():
    q = learned_model()
    fresh = gq.quantize_model(llama(seed=3), recipe="mxfp4", functional=False, exclude=["lm_head"])
    fresh.load_state_dict(q.state_dict())
    with torch.no_grad():
        ref = q(PROBE).logits
        assert torch.equal(fresh(PROBE).logits, ref)
        packed = gq.pack_model(copy.deepcopy(q))
        torch.testing.assert_close(packed(PROBE).logits, ref, rtol=1e-4, atol=1e-4)
    hadamard_only = rotated()  # a learned state dict into a Hadamard-rotated model: re-created as learned
    hadamard_only.load_state_dict(q.state_dict())
    with torch.no_grad():
        assert torch.equal(hadamard_only(PROBE).logits, ref)


def test_checkpoints_keep_or_refuse_the_learned_rotation(tmp_path):
    pytest.importorskip("safetensors")
    q = learned_model()
    name = next(n for n, m in q.named_modules() if isinstance(getattr(m, "input_rotation", None), LearnedInputRotation))
    loaded = gq.load(gq.save(q, tmp_path / "m.safetensors"))
    layer = loaded.layers[name]
    assert isinstance(layer.input_rotation, LearnedInputRotation)
    assert not any("input_rotation" in k for k in loaded.tensors)
    x = torch.randn(3, layer.in_features)
    own = q.get_submodule(name)
    with torch.no_grad():  # (a layer loaded without a model has the file's weights, no input quantizer)
        ref = (x.double() @ torch.block_diag(*own.input_rotation.matrix.double())) \
            @ own.weight_quant.quant_value(own.weight).double().T
        torch.testing.assert_close(layer(x).double(), ref, rtol=1e-5, atol=1e-5)
    fresh = gq.quantize_model(llama(seed=3), recipe="mxfp4", functional=False, exclude=["lm_head"])
    gq.load(tmp_path / "m.safetensors", fresh)
    with torch.no_grad():
        assert torch.equal(fresh(PROBE).logits, q(PROBE).logits)
    for fmt, module, path in (("compressed-tensors", "compressed_tensors", "ckpt"), ("gguf", "gguf", "m.gguf")):
        try:
            __import__(module)
        except ImportError:
            continue
        with pytest.raises(gq.export.CheckpointError, match="online Hadamard rotation.*'learn_rotations'"):
            gq.save(q, tmp_path / path, format=fmt)


def test_onnx_export_refuses_a_learned_rotation():
    pytest.importorskip("onnx")
    from groupquant.export.errors import ExportError
    from groupquant.export.onnx.model import export_onnx
    q = learned_model()
    name = next(n for n, m in q.named_modules() if isinstance(getattr(m, "input_rotation", None), LearnedInputRotation))
    layer = q.get_submodule(name)
    with pytest.raises(ExportError, match=r"input_rotation.*learned block rotation.*'learn_rotations'"):
        export_onnx(torch.nn.Sequential(layer), torch.randn(2, layer.in_features))
