"""Paper 003 Appendix C (Figures 5, 13-17): the last stage's blocks over the course of training.

"We plot the accuracy, cosine loss and l2 ratio metrics corresponding to each individual residual
block on validation during the training process ... only for the residual blocks in the last
stage for each architecture (this is because otherwise the dimensions of the output of the
residual block and the classifier will not match). In the case of cosine loss after individual
residual block, this set of experiments is achieved by plugging the classifier right after each
hidden representation and measuring the cosine between the gradient w.r.t. hidden representation
and the corresponding residual block's output."

So for each block i of the last stage (the blocks whose output has the last block's shape):
- accuracy (%) of the final classifier plugged after the block (the blocks above dropped,
  borderline.logits_after);
- cos(F_i(h_i), dL_i/dh_i), L_i the cross-entropy of the final classifier plugged "right after"
  h_i, the block's input (block i and those above dropped): the Taylor term of the paper's eq. 3,
  L(h_i + F_i(h_i)) ~ L(h_i) + F_i(h_i) . dL(h_i)/dh_i, with F_i(h_i) from the whole net;
- ||F_i(h_i)|| / ||h_i|| in the whole net (as Fig. 2).
Each is measured on every snapshot the run kept (its recipe's `snapshots`: the weights at
initialisation and at evenly spaced epochs), so nothing is trained again for it; the measure job
reads the snapshots in order and tags each row with its epoch.
"""

from __future__ import annotations

from contextlib import ExitStack

import pandas as pd
import torch

from . import register
from .blocks import batches, cosine, dropped, logit_gradient, per_example_norm, recording, require_blocks, spearman, splits_of

ACCURACY = "accuracy (%), classifier after the block"
COSINE = "cos(F(h), dL/dh), classifier after the block"
RATIO = "||F(h)|| / ||h||"
QUANTITIES = (ACCURACY, COSINE, RATIO)


def last_stage(shapes: list[tuple[int, ...]]) -> list[int]:
    """The 0-based indices of the blocks whose output shape is the last block's."""
    return [i for i, shape in enumerate(shapes) if shape == shapes[-1]]


def measure_last_stage(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (split, block, quantity, value, examples) for the last stage's blocks, numbered as in
    the whole net: the three quantities of the module's docstring, each a mean over examples."""
    blocks = require_blocks(model, "over_training")
    sums, counts, stage = {}, {}, None
    model.eval()

    def add(split: str, block: int, quantity: str, values: torch.Tensor) -> None:
        sums[split, block + 1, quantity] = sums.get((split, block + 1, quantity), 0.0) + values.sum().item()

    for split in settings["splits"]:
        counts[split] = 0
        for x, y in batches(data, split, settings, device):
            counts[split] += len(y)
            with torch.no_grad(), recording(blocks) as seen:
                logits = model(x)
                if stage is None:
                    stage = last_stage([tuple(f.shape[1:]) for _, f in seen])
                branches = {i: seen[i][1].float() for i in stage}  # F_i(h_i) in the whole net
                for i in stage:
                    add(split, i, RATIO, per_example_norm(branches[i]) / per_example_norm(seen[i][0].float()))
            add(split, stage[-1], ACCURACY, correct(logits, y))
            for i in stage:  # the classifier on h_i: block i and those above dropped
                with ExitStack() as stack, torch.enable_grad():
                    for block in blocks[i:]:
                        stack.enter_context(dropped(block))
                    seen = stack.enter_context(recording(blocks))
                    logits = model(x)
                    (grad,) = torch.autograd.grad(logits, [seen[i][0]], grad_outputs=logit_gradient(logits, y, directions=True))
                add(split, i, COSINE, cosine(branches[i], grad))
                if i - 1 in stage:  # h_i is block i-1's output: the classifier after block i-1
                    add(split, i - 1, ACCURACY, correct(logits.detach(), y))
    return pd.DataFrame([{"split": split, "block": block, "quantity": quantity, "value": total / counts[split], "examples": counts[split]}
                         for (split, block, quantity), total in sums.items()])


def correct(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 100.0 * (logits.argmax(1) == y).float()


def summarize_over_training(frame: pd.DataFrame) -> str:
    """Per quantity and split, the paper's readings: at the last snapshot, how the quantity runs
    from the lowest block of the stage to the highest (and its rank correlation with depth); over
    training, where the mean over blocks starts and ends; for the cosine, how many (block, epoch)
    points after initialisation are negative."""
    parts = []
    for quantity in [q for q in QUANTITIES if q in set(frame["quantity"])]:
        of_quantity = frame[frame["quantity"] == quantity]
        for split in splits_of(of_quantity):
            part = of_quantity[of_quantity["split"] == split]
            by = part.pivot_table(index="block", columns="epoch", values="value").sort_index()
            first, last = by.columns[0], by.columns[-1]
            final = by[last]
            text = (f"{quantity}, {split}: at epoch {last} block {final.index[0]} {final.iloc[0]:.3g} -> block "
                    f"{final.index[-1]} {final.iloc[-1]:.3g} (Spearman rho with depth {spearman(final)}); "
                    f"mean over blocks {by[first].mean():.3g} at epoch {first} -> {final.mean():.3g}")
            if quantity == COSINE:
                trained = by.loc[:, by.columns > 0]
                text += f"; negative at {(trained < 0).sum().sum()} of {trained.size} (block, epoch) points after initialisation"
            parts.append(text)
    return "; ".join(parts)


register("over_training", measure=measure_last_stage, summarize=summarize_over_training, reads="snapshots")
