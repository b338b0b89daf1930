"""Paper 003 Sec. 4.4 and Figures 7 and 20: the last residual block unrolled for more steps than
it was trained for.

"We ... unroll the last residual block for 20 extra steps. Naively unrolling the network leads to
activation explosion ... To control for that effect, we added a scaling factor on the output of
the last residual blocks."

Extra step k (1..`steps`) applies the trained last block once more to its own output, its branch
scaled by s: h_{L+k} = h_{L+k-1} + s F_L(h_{L+k-1}) for x + F (another variant combines s F as it
combines F). The L trained blocks run as trained. The paper gives no value of s: it is the setting
`scale` (s = 1 is the naive unrolling).

- unroll (Fig. 7): after k = 0..steps extra steps, the final classifier's loss, accuracy (%) and
  entropy on borderline, correct and all examples (borderline.py's groups, fixed at k = 0: the
  net as trained), with s = `scale`.
- unroll_blocks (Fig. 20): the net with all `steps` extra steps, per block (1..L the trained
  blocks, L+k the k-th extra step), cos(F(h), dL/dh) and ||F(h)|| / ||h|| as blocks.py measures
  them (F as added: s F on the extra steps), for s = 1 and s = `scale`.
"""

from __future__ import annotations

from contextlib import contextmanager

import pandas as pd
import torch
from torch import nn
from torch.nn import functional as F

from . import register
from .blocks import batches, loss_gradients, per_example_norm, require_blocks, splits_of
from .borderline import add_group_sums, groups


def block_of(model: nn.Module, combiner: nn.Module) -> nn.Module:
    """The module whose child the residual combiner is: the whole residual block (branch and skip)."""
    for module in model.modules():
        if any(child is combiner for child in module.children()):
            if isinstance(module, (nn.ModuleList, nn.ModuleDict, nn.Sequential)):
                break  # a container is never called as one block
            return module
    raise ValueError("unroll: the last residual combiner is not inside a block module of its own (a module that computes h + F(h))")


@contextmanager
def unrolled(model: nn.Module, steps: int, scale: float, every_step: bool = False):
    """While open, the model's last residual block runs `steps` extra times on its own output, its
    branch scaled by `scale` on the extra steps. `every_step`: the block passes on its outputs
    after 0, 1, ..., steps extra steps stacked along the batch, so one forward pass gives the
    logits of every step (eval mode: nothing after the block mixes examples), step-major."""
    combiner = require_blocks(model, "unroll")[-1]
    block = block_of(model, combiner)
    extra = {"on": False}

    def scaled_branch(module, inputs):
        return (inputs[0], scale * inputs[1]) if extra["on"] else None

    def again(module, inputs, output):
        if extra["on"]:
            return None  # an extra step's own call
        extra["on"] = True
        try:
            outputs = [output]
            for _ in range(steps):
                outputs.append(module(outputs[-1]))
        finally:
            extra["on"] = False
        return torch.cat(outputs) if every_step else outputs[-1]

    handles = [combiner.register_forward_pre_hook(scaled_branch), block.register_forward_hook(again)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def every_call(combiners: list[nn.Module]):
    """While open, `calls` holds (h, F) of every combiner call of the latest forward pass, in order
    (the last block's extra steps after the trained blocks); clear it before each pass."""
    calls: list = []
    handles = [c.register_forward_hook(lambda module, inputs, output: calls.append((inputs[0], inputs[1]))) for c in combiners]
    try:
        yield calls
    finally:
        for h in handles:
            h.remove()


def measure_unroll(model: nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (split, step, group, quantity, value, examples): after `step` extra steps of the last
    block, each group's mean loss, accuracy and entropy, and its share of the examples."""
    require_blocks(model, "unroll")
    sums, sizes = {}, {}
    model.eval()
    with torch.no_grad():
        for split in settings["splits"]:
            for x, y in batches(data, split, settings, device):
                with unrolled(model, settings["steps"], settings["scale"], every_step=True):
                    per_step = model(x).float().unflatten(0, (settings["steps"] + 1, len(y)))
                members = groups(per_step[0], y, settings["margin"])
                for group, member in members.items():
                    sizes[split, group] = sizes.get((split, group), 0) + int(member.sum())
                for step, logits in enumerate(per_step):
                    add_group_sums(sums, (split, step), logits, y, members)
    rows = [{"split": split, "step": step, "group": group, "quantity": metric,
             "value": total / sizes[split, group] if sizes[split, group] else float("nan"), "examples": sizes[split, "all"]}
            for (split, step, group, metric), total in sums.items()]
    rows += [{"split": split, "step": step, "group": group, "quantity": "share of examples (%)",
              "value": 100.0 * sizes[split, group] / sizes[split, "all"], "examples": sizes[split, "all"]}
             for split in settings["splits"] for group in ("borderline", "correct", "all") for step in range(settings["steps"] + 1)]
    return pd.DataFrame(rows)


def measure_unroll_blocks(model: nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (split, scale, block, extra_step, quantity, value, examples): per block of the unrolled
    net (extra_step k > 0: the last block's k-th extra step; 0: a trained block), the mean
    over examples of cos(F(h), dL/dh) and of ||F(h)|| / ||h||, unscaled (s = 1) and scaled."""
    combiners = require_blocks(model, "unroll_blocks")
    sums, counts = {}, {}
    model.eval()
    for scale in dict.fromkeys([1.0, float(settings["scale"])]):
        with unrolled(model, settings["steps"], scale), every_call(combiners) as calls:
            for split in settings["splits"]:
                counts[split] = 0
                for x, y in batches(data, split, settings, device):
                    calls.clear()
                    grads = loss_gradients(model, x, y, lambda: [h for h, _ in calls])
                    counts[split] += len(y)
                    for i, ((h, f), g) in enumerate(zip(calls, grads)):
                        f, h = f.detach().float(), h.detach().float()
                        cos = F.cosine_similarity(f.flatten(1), g.float().flatten(1), dim=1)
                        for quantity, v in (("cos(F(h), dL/dh)", cos), ("||F(h)|| / ||h||", per_example_norm(f) / per_example_norm(h))):
                            sums[split, scale, i + 1, quantity] = sums.get((split, scale, i + 1, quantity), 0.0) + v.sum().item()
    trained = len(combiners)  # blocks after it are extra steps
    return pd.DataFrame([{"split": split, "scale": scale, "block": block, "extra_step": max(0, block - trained), "quantity": quantity,
                          "value": total / counts[split], "examples": counts[split]} for (split, scale, block, quantity), total in sums.items()])


def summarize_unroll(frame: pd.DataFrame) -> str:
    """The paper's reading of Fig. 7: the extra steps correct borderline examples (their accuracy
    rises), the training loss falls, the held-out loss may rise."""
    parts = []
    for split in splits_of(frame):
        of_split = frame[frame["split"] == split]

        def curve(group, metric):
            part = of_split[(of_split["group"] == group) & (of_split["quantity"] == metric)]
            return part.groupby("step")["value"].mean().sort_index()

        border, whole, loss = curve("borderline", "accuracy (%)"), curve("all", "accuracy (%)"), curve("all", "loss")
        share = curve("borderline", "share of examples (%)").iloc[0]
        last = border.index[-1]
        parts.append(f"{split}: over {last} extra steps, borderline examples ({share:.1f}%) {border.iloc[0]:.0f}% -> {border.iloc[-1]:.0f}% "
                     f"right, all examples {whole.iloc[0]:.1f}% -> {whole.iloc[-1]:.1f}%, loss {loss.iloc[0]:.4f} -> {loss.iloc[-1]:.4f}")
    return "; ".join(parts)


def summarize_unroll_blocks(frame: pd.DataFrame) -> str:
    """The paper's reading of Fig. 20: with the scaling the cosine stays negative on every extra
    step, without it on the first two only; and how large the extra steps' changes are."""
    parts = []
    for split in splits_of(frame):
        for scale in sorted(set(frame["scale"]), reverse=True):
            part = frame[(frame["split"] == split) & (frame["scale"] == scale) & (frame["extra_step"] > 0)]

            def by_step(quantity):
                return part[part["quantity"] == quantity].groupby("extra_step")["value"].mean().sort_index()

            cos, ratio = by_step("cos(F(h), dL/dh)"), by_step("||F(h)|| / ||h||")
            first_positive = cos.index[cos >= 0].min() if (cos >= 0).any() else None
            parts.append(f"{split}, scale {scale:g}: cos negative on {(cos < 0).sum()} of {len(cos)} extra steps"
                         f"{f' (first not negative: step {first_positive})' if first_positive is not None else ''}, "
                         f"{cos.iloc[0]:+.3f} at the first, {cos.iloc[-1]:+.3f} at the last; ||F(h)|| / ||h|| {ratio.iloc[0]:.3g} -> {ratio.iloc[-1]:.3g}")
    return "; ".join(parts)


register("unroll", measure=measure_unroll, summarize=summarize_unroll)
register("unroll_blocks", measure=measure_unroll_blocks, summarize=summarize_unroll_blocks)
