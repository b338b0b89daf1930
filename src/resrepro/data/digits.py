"""The mini-scale image dataset: scikit-learn's bundled handwritten digits.

1,797 real grey images of 8 x 8 pixels with values 0..16, shipped inside scikit-learn, so the
mini scale needs no download. Stored in the PREPARED FORMAT (see resrepro.data.images) as
uint8 value * 15 (0..240: lossless, and on the same 0..255 scale as CIFAR), shape (N, 1, 8, 8),
with a fixed seeded train/test split (the bundle has none).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import sklearn
import torch
from sklearn.datasets import load_digits

from resrepro.data.images import save_prepared

_SCALE = 15  # 16 * 15 = 240 <= 255


def prepare_digits(out: str | Path, test_size: int = 500, split_seed: int = 0) -> None:
    """Write the digits in the PREPARED FORMAT: the last `test_size` of a seeded permutation are test."""
    digits = load_digits()
    images = np.rint(digits.images).astype(np.uint8)  # (1797, 8, 8), 0..16
    n = len(images)
    if not 0 < test_size < n:
        raise ValueError(f"test_size must be between 1 and {n - 1}, got {test_size}")
    x = torch.from_numpy(images * _SCALE).unsqueeze(1)  # (N, 1, 8, 8)
    y = torch.from_numpy(digits.target.astype(np.int64))
    order = torch.from_numpy(np.random.RandomState(split_seed).permutation(n))
    train, test = order[:-test_size], order[-test_size:]
    save_prepared(
        out,
        train_x=x[train],
        train_y=y[train],
        test_x=x[test],
        test_y=y[test],
        classes=[str(c) for c in digits.target_names],
        name="digits",
        source=(
            f"sklearn.datasets.load_digits (scikit-learn {sklearn.__version__}, bundled copy of "
            f"UCI Optical Recognition of Handwritten Digits), split_seed={split_seed}, "
            f"test_size={test_size}"
        ),
    )


__all__ = ["prepare_digits"]
