"""Paper 003 Sec. 4.5, Figures 8 and 9: how sharing blocks makes norms explode, over training.

"We notice that sharing layers make the layer activations explode during the forward propagation
at initialization due to the repeated application of the same operation ... Consequently, the
norm of the gradients also explodes at initialization." Figure 8 tracks the "gradient norm ratio
between first block in first and last stage of resnet", on training and validation data.

Per snapshot the run kept (reads="snapshots"), on the first `examples` of each split:
- ||dL/dh|| at the input of the first block of the first stage over ||dL/dh|| at the input of
  the first block of the last stage (stages: the blocks that share an output shape), each a mean
  over examples of the per-example norm, L each example's cross-entropy;
- ||h|| at the output of the last block over ||h|| at the input of the first block, each a mean
  over examples: how much the forward pass amplifies the representation.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch import nn

from . import register
from .blocks import batches, per_example_norm, require_blocks, splits_of
from .unroll import block_of

GRADIENT = "||dL/dh||, first block of the first stage / of the last stage"
FORWARD = "||h||, after the last block / before the first"


def measure_stage_norms(model: nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (split, quantity, value, examples): the two ratios of the module docstring."""
    blocks = [block_of(model, c) for c in require_blocks(model, "stage_norms")]
    seen: dict = {}

    def hook_for(i):
        def hook(module, inputs, output):
            seen[i] = (inputs[0], output)
        return hook

    handles = [b.register_forward_hook(hook_for(i)) for i, b in enumerate(blocks)]
    sums, counts = {}, {}
    model.eval()
    try:
        for split in settings["splits"]:
            counts[split] = 0
            for x, y in batches(data, split, settings, device):
                with torch.enable_grad():
                    loss = nn.functional.cross_entropy(model(x).float(), y, reduction="sum")
                    shapes = [tuple(seen[i][1].shape[1:]) for i in range(len(blocks))]
                    first_of_last = shapes.index(shapes[-1])
                    inputs = [seen[0][0], seen[first_of_last][0]]
                    grads = torch.autograd.grad(loss, inputs)
                counts[split] += len(y)
                norms = {"first": per_example_norm(grads[0].float()).sum().item(), "last": per_example_norm(grads[1].float()).sum().item(),
                         "h_in": per_example_norm(seen[0][0].detach().float()).sum().item(),
                         "h_out": per_example_norm(seen[len(blocks) - 1][1].detach().float()).sum().item()}
                for key, value in norms.items():
                    sums[split, key] = sums.get((split, key), 0.0) + value
    finally:
        for handle in handles:
            handle.remove()
    rows = []
    for split in settings["splits"]:
        rows.append({"split": split, "quantity": GRADIENT, "value": sums[split, "first"] / sums[split, "last"], "examples": counts[split]})
        rows.append({"split": split, "quantity": FORWARD, "value": sums[split, "h_out"] / sums[split, "h_in"], "examples": counts[split]})
    return pd.DataFrame(rows)


def summarize_stage_norms(frame: pd.DataFrame) -> str:
    """Per quantity and split: the ratio at initialisation, at the last snapshot, and its largest."""
    parts = []
    for quantity in [q for q in (GRADIENT, FORWARD) if q in set(frame["quantity"])]:
        for split in splits_of(frame):
            by = frame[(frame["quantity"] == quantity) & (frame["split"] == split)].groupby("epoch")["value"].mean().sort_index()
            parts.append(f"{quantity}, {split}: {by.iloc[0]:.3g} at epoch {by.index[0]}, {by.iloc[-1]:.3g} at epoch {by.index[-1]}, "
                         f"largest {by.max():.3g} (epoch {by.idxmax()})")
    return "; ".join(parts)


register("stage_norms", measure=measure_stage_norms, summarize=summarize_stage_norms, reads="snapshots")
