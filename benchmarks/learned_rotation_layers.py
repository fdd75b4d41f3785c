"""learn_rotations on six SmolLM2-135M layers: the per-layer objective (mean squared output error vs
float on 512 calibration rows) learned / Hadamard, per learning rate and step count, with the time per layer.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/learned_rotation_layers.py mxfp4 1e-3,1e-2 10,30

Model: smooth then rotate (ptq's first steps) on 4 x 512 docstring tokens, head float; then the
captured inputs of the layers listed below and ``_learn_one`` for each setting (nothing installed).
"""
import sys, time, copy, torch
sys.path.insert(0, "benchmarks")
import groupquant as gq
from groupquant.calib.learned_rotation import _capture, _learn_one
from groupquant.calib.rotate import rotate_model
from groupquant.calib.smooth import smooth_model
from groupquant.eval import python_docstrings, token_sets
from llm_models import load_smollm2
torch.manual_seed(0)
recipe = sys.argv[1] if len(sys.argv) > 1 else "mxfp4"
model, tok = load_smollm2()
sets = token_sets(python_docstrings(), tok, seq_len=512, evaluation_windows=8, calibration_windows=4)
items = sets.calibration_inputs()
q = gq.quantize_model(model, recipe=recipe, functional=False, exclude=["lm_head"])
smooth_model(q, items, progress=False)
rotate_model(q, exclude=["lm_head"])
names = ["model.layers.2.self_attn.q_proj", "model.layers.2.self_attn.o_proj", "model.layers.2.mlp.gate_proj",
         "model.layers.2.mlp.down_proj", "model.layers.20.mlp.down_proj", "model.layers.20.self_attn.v_proj"]
layers = {n: q.get_submodule(n) for n in names}
t = time.time()
xs = _capture(q, layers, items, 512, 0)
print("capture", time.time() - t, flush=True)
for lr in [float(a) for a in sys.argv[2].split(",")]:
    for steps in [int(a) for a in sys.argv[3].split(",")]:
        out = []
        t = time.time()
        for n in names:
            start, best, r = _learn_one(layers[n], xs[n], steps, lr)
            out.append(best / start)
        print(f"lr {lr:g} steps {steps}: " + " ".join(f"{v:.3f}" for v in out), f"{(time.time()-t)/len(names):.2f} s/layer", flush=True)
