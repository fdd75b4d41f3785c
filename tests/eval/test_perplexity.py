"""perplexity against a hand computation on a tiny random Llama; token sets disjoint and complete."""
import math

import pytest
import torch

from groupquant.eval import perplexity, python_docstrings, token_sets

transformers = pytest.importorskip("transformers")


def tiny_llama(context=64):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=context)
    return transformers.LlamaForCausalLM(cfg).eval()


def hand_perplexity(model, ids, seq_len):
    """Per window: -log softmax(logits)[next token], summed in Python floats; exp of the mean."""
    nll, count = 0.0, 0
    for w in range(len(ids) // seq_len):
        window = ids[w * seq_len:(w + 1) * seq_len]
        with torch.no_grad():
            logits = model(window[None]).logits[0].double()
        for t in range(seq_len - 1):
            row = logits[t]
            log_z = math.log(sum(math.exp(v - float(row.max())) for v in row.tolist())) + float(row.max())
            nll += log_z - float(row[window[t + 1]])
            count += 1
    return math.exp(nll / count)


def test_perplexity_equals_the_hand_computation():
    model = tiny_llama()
    ids = torch.randint(0, 50, (53,), generator=torch.Generator().manual_seed(1))  # 3 windows of 16, tail dropped
    got = perplexity(model, ids, seq_len=16, progress=False)
    assert got == pytest.approx(hand_perplexity(model, ids, 16), rel=1e-10)
    assert perplexity(model, ids[None], seq_len=16, progress=False) == got  # [1, N] accepted


def test_perplexity_errors_name_the_setting():
    model = tiny_llama(context=32)
    ids = torch.arange(40) % 50
    with pytest.raises(ValueError, match="longer than the model's context"):
        perplexity(model, ids, seq_len=33)
    with pytest.raises(ValueError, match="fewer than one window of seq_len=32"):
        perplexity(model, ids[:20], seq_len=32)
    with pytest.raises(ValueError, match="seq_len must be an int >= 2"):
        perplexity(model, ids, seq_len=1)
    with pytest.raises(ValueError, match="1-D sequence of integer"):
        perplexity(model, torch.rand(40), seq_len=8)


def test_token_sets_are_disjoint_documents_in_order():
    docs = python_docstrings(["json", "csv", "textwrap", "difflib"])
    assert len(docs) > 10 and len(set(docs)) == len(docs)
    encode = lambda text: [ord(c) % 50 for c in text]  # noqa: E731 (one token per character)
    sets = token_sets(docs, encode, seq_len=64, evaluation_windows=3, calibration_windows=2)
    assert sets.evaluation.shape == (3 * 64,) and sets.calibration.shape == (2, 64)
    first = "\n\n".join(docs[:sets.evaluation_documents])
    assert sets.evaluation.tolist() == encode(first)[:192]
    after = "\n\n".join(docs[sets.evaluation_documents:sets.evaluation_documents + sets.calibration_documents])
    assert sets.calibration.reshape(-1).tolist() == encode(after)[:128]
    assert [x.shape for x in sets.calibration_inputs()] == [(1, 64), (1, 64)]


def test_token_sets_too_short_text_is_an_error():
    with pytest.raises(ValueError, match="fewer than calibration_windows"):
        token_sets(["a" * 100, "b" * 10], list, seq_len=10, evaluation_windows=10, calibration_windows=5)


def test_token_ids_outside_the_vocabulary_are_named():
    model = tiny_llama()
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, vocab_size=50\), got ids from 0 to 50"):
        perplexity(model, torch.arange(51), seq_len=8, progress=False)
    with pytest.raises(ValueError, match="got ids from -1"):
        perplexity(model, torch.arange(-1, 20), seq_len=8, progress=False)


def test_a_model_in_training_mode_is_evaluated_without_dropout_and_keeps_its_mode():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                                   attention_dropout=0.5)
    model = transformers.LlamaForCausalLM(cfg).train()
    ids = torch.randint(0, 50, (48,), generator=torch.Generator().manual_seed(2))
    got = perplexity(model, ids, seq_len=16, progress=False)
    assert model.training
    assert got == pytest.approx(hand_perplexity(model.eval(), ids, 16), rel=1e-10)
