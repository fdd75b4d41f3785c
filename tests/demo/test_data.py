import pytest
import torch

pytest.importorskip("sklearn", reason="the demo's data needs scikit-learn (the demo extra)")

from groupquant.demo.data import load_digits_split  # noqa: E402


def test_split_covers_all_digits_once_with_standardized_training_pixels():
    from sklearn.datasets import load_digits

    raw = torch.as_tensor(load_digits().data, dtype=torch.float32)
    d = load_digits_split(seed=3, test_fraction=0.25)
    assert len(d.y_train) + len(d.y_test) == len(raw) == 1797
    assert len(d.y_test) == round(1797 * 0.25)
    assert d.x_train.shape == (len(d.y_train), 64) and d.x_train.dtype == torch.float32
    assert set(d.y_train.tolist()) == set(range(10)) and d.y_train.dtype == torch.int64
    # standardized with the training set's own statistics: mean 0, std = s / (s + 0.1)
    assert torch.allclose(d.x_train.mean(0), torch.zeros(64), atol=1e-5)
    # a pixel that is 0 in every image has mean 0 and std 0: it stays exactly 0
    always_zero = (raw == 0).all(0)
    assert always_zero.any() and (d.x_test[:, always_zero] == 0).all()
    # the split is a partition: each label keeps its count
    counts = torch.bincount(torch.cat([d.y_train, d.y_test]), minlength=10)
    assert torch.equal(counts, torch.bincount(torch.as_tensor(load_digits().target), minlength=10))


def test_seed_decides_the_split():
    a, b, c = load_digits_split(seed=0), load_digits_split(seed=0), load_digits_split(seed=1)
    assert torch.equal(a.x_test, b.x_test) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.y_test, c.y_test)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, 2])
def test_bad_test_fraction_is_rejected(bad):
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits_split(test_fraction=bad)
