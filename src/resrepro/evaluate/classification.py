"""Test loss and error of an image classifier, in batches, without gradients."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from ..data.images import normalize
from ..speed import Speed

FLOAT32 = Speed(amp=False, channels_last=False, compile=None, fused_optimizer=False)
# Evaluation holds a layer's activations at a time (no gradients), training every layer's for its
# backward pass, so a batch of 4 training batches fits where one trained; on a GPU an evaluation
# batch of 128 images is its kernel launches, as a training step is.
EVAL_BATCHES = 4


def eval_batch_size(batch_size: int) -> int:
    """The images a classification run evaluates at once: EVAL_BATCHES of its training batches."""
    return EVAL_BATCHES * batch_size


def evaluate(model, x_uint8: torch.Tensor, y: torch.Tensor, mean, std, batch_size: int, speed: Speed = FLOAT32) -> tuple[float, float]:
    """Returns (mean cross-entropy, error in %), with the training run's autocast and memory
    layout (`speed`). Restores the model's train/eval mode. The sums stay on the device, read once;
    each image's loss is summed in float64, so the batch size moves the mean by float64's rounding
    only."""
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), dtype=torch.float64, device=y.device)
    wrong = torch.zeros((), dtype=torch.int64, device=y.device)
    # no_grad as a block, not a decorator: mutation testing (make mutation) skips decorated functions
    with torch.no_grad():
        for start in range(0, len(y), batch_size):
            x = speed.layout(normalize(x_uint8[start : start + batch_size].float(), mean, std))
            with speed.autocast(x.device):
                logits = model(x).to(speed.dtype)
            target = y[start : start + batch_size]
            loss_sum += F.cross_entropy(logits, target, reduction="none").double().sum()
            wrong += (logits.argmax(1) != target).sum()
    model.train(was_training)
    return loss_sum.item() / len(y), 100.0 * wrong.item() / len(y)


def evaluate_stacked(stack, x_uint8: torch.Tensor, y: torch.Tensor, mean, std, batch_size: int,
                     speed: Speed = FLOAT32) -> list[tuple[float, float]]:
    """`evaluate` for runs stacked as one program (models.stacked.StackedRuns): each batch through
    all of them at once; (mean cross-entropy, error in %) of each run, as `evaluate` gives it alone."""
    was_training = stack.training
    stack.eval()
    loss_sums = torch.zeros(stack.count, dtype=torch.float64, device=y.device)
    wrong = torch.zeros(stack.count, dtype=torch.int64, device=y.device)
    with torch.no_grad():
        for start in range(0, len(y), batch_size):
            x = normalize(x_uint8[start : start + batch_size].float(), mean, std).to(speed.dtype)
            with speed.autocast(x.device):
                logits = stack(x, shared=True).to(speed.dtype)  # (runs, N, classes)
            target = y[start : start + batch_size]
            loss_sums += torch.stack([F.cross_entropy(run_logits, target, reduction="none").double().sum() for run_logits in logits])
            wrong += (logits.argmax(-1) != target).sum(-1)
    stack.train(was_training)
    return [(loss_sum / len(y), 100.0 * errors / len(y)) for loss_sum, errors in zip(loss_sums.tolist(), wrong.tolist())]
