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


def evaluate_stacked(stack, x_uint8: torch.Tensor, y: torch.Tensor, mean, std, batch_size: int,
                     speed: Speed = FLOAT32) -> list[tuple[float, float]]:
    """`evaluate` for runs stacked as one program (models.stacked.StackedRuns): each batch through
    all of them at once; (mean cross-entropy, error in %) of each run, as `evaluate` gives it alone."""
    was_training = stack.training
    stack.eval()
    loss_sums, wrong = [0.0] * stack.count, [0] * stack.count
    with torch.no_grad():
        for start in range(0, len(y), batch_size):
            x = normalize(x_uint8[start : start + batch_size].float(), mean, std).to(speed.dtype)
            with speed.autocast(x.device):
                logits = stack(x, shared=True).to(speed.dtype)  # (runs, N, classes)
            target = y[start : start + batch_size]
            losses = torch.stack([F.cross_entropy(run_logits, target, reduction="sum") for run_logits in logits])
            for k, (loss, errors) in enumerate(zip(losses.tolist(), (logits.argmax(-1) != target).sum(-1).tolist())):
                loss_sums[k] += loss
                wrong[k] += errors
    stack.train(was_training)
    return [(loss_sum / len(y), 100.0 * errors / len(y)) for loss_sum, errors in zip(loss_sums, wrong)]
