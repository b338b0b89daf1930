"""Paper 003 Sec. 4.3 and Figure 6: what the last blocks do to borderline examples.

"We focus on borderline examples, defined as examples that require less than 10% probability
change to flip prediction to, or from the correct class. We measure loss, accuracy and entropy
over borderline examples over last 5 blocks of the network using the network final classifier."

The final classifier applied after block i is the net with the blocks above i dropped (their
branches set to zero): in an identity-skip net (x + F) each dropped block passes its input
through, so the classifier reads h_i. The blocks above i must be in the classifier's stage;
the last 5 blocks are (a CIFAR ResNet-110's last stage has 18).

Groups are fixed at the first of the measured blocks: borderline, |p(true class) - the largest
other probability| < `margin`; correct, already right by at least `margin`; and all examples.
For each block and group: the mean cross-entropy, the accuracy (%) and the mean entropy of the
predicted distribution (nats), and the group's share of the examples (the same at every block).
"""

from __future__ import annotations

from contextlib import ExitStack

import pandas as pd
import torch
from torch.nn import functional as F

from . import register
from .blocks import batches, dropped, require_blocks, splits_of

GROUPS = ("borderline", "correct", "all")
METRICS = ("loss", "accuracy (%)", "entropy")


def margin_to_flip(probs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """p(true class) minus the largest other probability, per example: > 0 right, < 0 wrong."""
    true = probs.gather(1, y[:, None])[:, 0]
    others = probs.scatter(1, y[:, None], float("-inf")).max(dim=1).values
    return true - others


def groups(logits: torch.Tensor, y: torch.Tensor, margin: float) -> dict[str, torch.Tensor]:
    """Each group's members (boolean per example), from the logits that fix the groups."""
    to_flip = margin_to_flip(logits.softmax(1), y)
    return {"borderline": to_flip.abs() < margin, "correct": to_flip >= margin, "all": torch.ones_like(y, dtype=torch.bool)}


def add_group_sums(sums: dict, key: tuple, logits: torch.Tensor, y: torch.Tensor, members: dict[str, torch.Tensor]) -> None:
    """Adds each group's sum of loss, accuracy (%) and entropy (nats) to sums[(*key, group, metric)]."""
    probs = logits.softmax(1)
    values = {"loss": F.cross_entropy(logits, y, reduction="none"), "accuracy (%)": 100.0 * (logits.argmax(1) == y).float(),
              "entropy": -(probs * probs.clamp_min(1e-12).log()).sum(1)}
    for group, member in members.items():
        for metric, v in values.items():
            sums[(*key, group, metric)] = sums.get((*key, group, metric), 0.0) + v[member].sum().item()


def logits_after(model: torch.nn.Module, blocks: list, i: int, x: torch.Tensor) -> torch.Tensor:
    """The final classifier's logits on h_i: the net with blocks i+1..L (0-based: after index i) dropped."""
    with ExitStack() as stack:
        for block in blocks[i + 1 :]:
            stack.enter_context(dropped(block))
        return model(x)


def measure_borderline(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (split, block, group, quantity, value, examples): per measured block and group, the mean
    loss, accuracy and entropy, `examples` the group's size (what the mean is over); and the group's
    share of the examples, `examples` the split's."""
    blocks = require_blocks(model, "borderline")
    last = list(range(max(0, len(blocks) - settings["last_blocks"]), len(blocks)))
    sums: dict = {}
    sizes: dict = {}
    model.eval()
    with torch.no_grad():
        for split in settings["splits"]:
            for x, y in batches(data, split, settings, device):
                per_block = [logits_after(model, blocks, i, x).float() for i in last]
                members = groups(per_block[0], y, settings["margin"])
                for group, member in members.items():
                    sizes[split, group] = sizes.get((split, group), 0) + int(member.sum())
                for i, logits in zip(last, per_block):
                    add_group_sums(sums, (split, i + 1), logits, y, members)
    rows = [{"split": split, "block": block, "group": group, "quantity": metric,
             "value": total / sizes[split, group] if sizes[split, group] else float("nan"), "examples": sizes[split, group]}
            for (split, block, group, metric), total in sums.items()]
    rows += [{"split": split, "block": i + 1, "group": group, "quantity": "share of examples (%)",
              "value": 100.0 * sizes[split, group] / sizes[split, "all"], "examples": sizes[split, "all"]}
             for split in settings["splits"] for group in GROUPS for i in last]
    return pd.DataFrame(rows)


def summarize_borderline(frame: pd.DataFrame) -> str:
    """The paper's reading: the next blocks correct many borderline examples (their accuracy rises)
    while the whole set's accuracy barely moves, and entropy falls."""
    parts = []
    for split in splits_of(frame):
        of_split = frame[frame["split"] == split]

        def curve(group, metric):
            part = of_split[(of_split["group"] == group) & (of_split["quantity"] == metric)]
            return part.groupby("block")["value"].mean().sort_index()

        border, whole, entropy = curve("borderline", "accuracy (%)"), curve("all", "accuracy (%)"), curve("all", "entropy")
        share = curve("borderline", "share of examples (%)").iloc[0]
        parts.append(f"{split}: {share:.1f}% of the examples borderline, their accuracy {border.iloc[0]:.0f}% -> {border.iloc[-1]:.0f}% over blocks "
                     f"{border.index[0]}-{border.index[-1]} (all examples {whole.iloc[0]:.1f}% -> {whole.iloc[-1]:.1f}%); "
                     f"entropy {entropy.iloc[0]:.3f} -> {entropy.iloc[-1]:.3f}")
    return "; ".join(parts)


register("borderline", measure=measure_borderline, summarize=summarize_borderline)
