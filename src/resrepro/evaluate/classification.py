"""Test loss and error of an image classifier, in batches, without gradients."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from ..data.images import normalize
from ..speed import Speed

FLOAT32 = Speed(amp=False, channels_last=False, compile=None, fused_optimizer=False)


def evaluate(model, x_uint8: torch.Tensor, y: torch.Tensor, mean, std, batch_size: int, speed: Speed = FLOAT32) -> tuple[float, float]:
    """Returns (mean cross-entropy, error in %), with the training run's autocast and memory
    layout (`speed`). Restores the model's train/eval mode."""
    was_training = model.training
    model.eval()
    loss_sum, wrong = 0.0, 0
    # no_grad as a block, not a decorator: mutation testing (make mutation) skips decorated functions
    with torch.no_grad():
        for start in range(0, len(y), batch_size):
            x = speed.layout(normalize(x_uint8[start : start + batch_size].float(), mean, std))
            with speed.autocast(x.device):
                logits = model(x).to(speed.dtype)
            target = y[start : start + batch_size]
            loss_sum += F.cross_entropy(logits, target, reduction="sum").item()
            wrong += (logits.argmax(1) != target).sum().item()
    model.train(was_training)
    return loss_sum / len(y), 100.0 * wrong / len(y)
