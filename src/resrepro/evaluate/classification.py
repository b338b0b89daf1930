"""Test loss and error of an image classifier, in batches, without gradients."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from ..data.images import normalize


def evaluate(model, x_uint8: torch.Tensor, y: torch.Tensor, mean, std, batch_size: int, amp: bool = False) -> tuple[float, float]:
    """Returns (mean cross-entropy, error in %). Restores the model's train/eval mode."""
    was_training = model.training
    model.eval()
    loss_sum, wrong = 0.0, 0
    # no_grad as a block, not a decorator: mutation testing (make mutation) skips decorated functions
    with torch.no_grad():
        for start in range(0, len(y), batch_size):
            x = normalize(x_uint8[start : start + batch_size].float(), mean, std)
            if x.is_cuda:
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
                logits = model(x).float()
            target = y[start : start + batch_size]
            loss_sum += F.cross_entropy(logits, target, reduction="sum").item()
            wrong += (logits.argmax(1) != target).sum().item()
    model.train(was_training)
    return loss_sum / len(y), 100.0 * wrong / len(y)
