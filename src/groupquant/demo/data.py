"""The demo's real data: scikit-learn's handwritten digits (shipped inside the package, no download).

1797 images of 8x8 pixels (values 0..16) in 10 classes. :func:`load_digits_split` shuffles them
with a seed, holds out a test set, and standardizes every pixel with the training set's mean and
standard deviation, so the float model trains in a few seconds on a CPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["DigitsSplit", "load_digits_split", "require_demo_packages"]

NUM_CLASSES = 10
NUM_FEATURES = 64

_MISSING = ("the demo needs scikit-learn (for its built-in digits data set) and tqdm (progress bars); "
            "install them with: pip install 'groupquant[demo]'  (or run `make demo`)")


def require_demo_packages() -> None:
    """Raise ImportError with the install command if scikit-learn or tqdm is missing."""
    try:
        import sklearn.datasets  # noqa: F401
        import tqdm  # noqa: F401
    except ImportError as exc:
        raise ImportError(_MISSING) from exc


@dataclass(frozen=True)
class DigitsSplit:
    """Standardized digits, split into train and test.

    Fields:
        x_train / x_test: float32 ``[n, 64]`` pixels, standardized per pixel (training statistics).
        y_train / y_test: int64 ``[n]`` class labels 0..9.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def num_features(self) -> int:
        """Pixels per image (64)."""
        return int(self.x_train.shape[1])


def load_digits_split(seed: int = 0, test_fraction: float = 0.25) -> DigitsSplit:
    """Load scikit-learn's digits, shuffle with ``seed``, hold out ``test_fraction`` of them as the test set.

    Each pixel is standardized as ``(x - mean) / (std + 0.1)`` with the training set's statistics
    (the ``+ 0.1`` keeps border pixels that are almost always 0 from blowing up).
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    require_demo_packages()
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.as_tensor(digits.data, dtype=torch.float32)
    y = torch.as_tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    mean = x[train].mean(dim=0)
    std = x[train].std(dim=0) + 0.1
    x = (x - mean) / std
    return DigitsSplit(x[train], y[train], x[test], y[test])
