"""evaluate/classification.py: a classifier's test loss and error, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from resrepro.evaluate.classification import EVAL_BATCHES, eval_batch_size, evaluate


class Lookup(nn.Module):
    """Logits chosen per image: image i (its first pixel, i / 255 before normalisation) gets row i."""

    def __init__(self, table: list[list[float]]):
        super().__init__()
        self.table = torch.tensor(table)

    def forward(self, x):
        return self.table[(x[:, 0, 0, 0] * 255).round().long()]


def images(n: int) -> torch.Tensor:
    x = torch.zeros(n, 1, 2, 2, dtype=torch.uint8)
    x[:, 0, 0, 0] = torch.arange(n, dtype=torch.uint8)
    return x


@pytest.mark.parametrize("batch_size", [1, 2, 3, 100])
def test_loss_and_error_by_hand(batch_size):
    """Three images, two classes. Image 0: logits (0, 0), label 0: loss log 2, right by argmax's
    first index. Image 1: (2, 0), label 1: loss log(1 + e^2), wrong. Image 2: (0, 3), label 1:
    loss log(1 + e^-3), right. Mean loss and 1 of 3 wrong, whatever the batch."""
    model = Lookup([[0.0, 0.0], [2.0, 0.0], [0.0, 3.0]])
    loss, error = evaluate(model, images(3), torch.tensor([0, 1, 1]), mean=[0.0], std=[1.0], batch_size=batch_size)
    assert loss == pytest.approx((math.log(2) + math.log(1 + math.e**2) + math.log(1 + math.e**-3)) / 3, rel=1e-6)
    assert error == pytest.approx(100 / 3)


def test_the_batch_size_moves_neither_the_error_nor_the_loss_beyond_rounding():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    x, y = torch.randint(0, 256, (300, 3, 8, 8), dtype=torch.uint8), torch.randint(0, 10, (300,))
    model.train()
    results = [evaluate(model, x, y, [0.5] * 3, [0.25] * 3, batch_size) for batch_size in (1, 7, 128, 512)]
    assert len({error for _, error in results}) == 1
    assert max(loss for loss, _ in results) - min(loss for loss, _ in results) < 1e-6
    assert model.training  # the mode it found, restored


def test_an_evaluation_batch_is_four_training_batches():
    assert EVAL_BATCHES == 4 and eval_batch_size(128) == 512
