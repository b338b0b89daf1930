"""Paper 003 Sec. 4.4 and Figures 7 and 20: the last residual block unrolled for more steps than
it was trained for.

"We ... unroll the last residual block for 20 extra steps. Naively unrolling the network leads to
activation explosion ... To control for that effect, we added a scaling factor on the output of
the last residual blocks."

Extra step k (1..`steps`) applies the trained last block once more to its own output, its branch
scaled by s: h_{L+k} = h_{L+k-1} + s F_L(h_{L+k-1}) for x + F (another variant combines s F as it
combines F). The L trained blocks run as trained. The paper gives no value of s: it is the setting
`scale` (s = 1 is the naive unrolling). The unrolled block is the last one that keeps its input's
shape (unrollable()): the last block of every CIFAR ResNet with 2 or more blocks per stage; in a
net with one block per stage (the integration tests' depth 8) an earlier one, which the rows name.

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

from . import register
from .blocks import batches, cosine, forward_hooks, loss_gradients, per_example_norm, require_blocks, splits_of
from .borderline import add_group_sums, groups


def block_of(model: nn.Module, combiner: nn.Module) -> nn.Module:
    """The module whose child the residual combiner is: the whole residual block (branch and skip)."""
    for module in model.modules():
        if any(child is combiner for child in module.children()):
            if isinstance(module, (nn.ModuleList, nn.ModuleDict, nn.Sequential)):
                break  # a container is never called as one block
            return module
    raise ValueError("unroll: the last residual combiner is not inside a block module of its own (a module that computes h + F(h))")


def unrollable(model: nn.Module, x: torch.Tensor) -> int:
    """The 0-based index (among the residual combiners) of the last block whose output has its
    input's shape, so that it can run on its own output: the net's last block in every CIFAR
    ResNet with 2 or more blocks per stage (a projection block only starts a stage)."""
    combiners = require_blocks(model, "unroll")
    shapes: dict[int, bool] = {}

    def hook_for(i):
        def hook(module, inputs, output):
            shapes[i] = inputs[0].shape == output.shape
        return hook

    handles = [block_of(model, c).register_forward_hook(hook_for(i)) for i, c in enumerate(combiners)]
    try:
        with torch.no_grad():
            model(x[:1])
    finally:
        for h in handles:
            h.remove()
    keeping = [i for i, same in sorted(shapes.items()) if same]
    if not keeping:
        raise ValueError("unroll: no residual block keeps its input's shape, so none can run on its own output")
    return keeping[-1]


@contextmanager
def unrolled(model: nn.Module, steps: int, scale: float, index: int, every_step: bool = False):
    """While open, residual block `index` (unrollable()) runs `steps` extra times on its own
    output, its branch scaled by `scale` on the extra steps. `every_step`: the block passes on its
    outputs after 0, 1, ..., steps extra steps stacked along the batch, so one forward pass gives
    the logits of every step (eval mode: nothing after the block mixes examples), step-major."""
    combiner = require_blocks(model, "unroll")[index]
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
    """While open, `calls` holds (index of the combiner, h, F) of every combiner call of the latest
    forward pass, in order (an unrolled block's extra steps right after its own call); clear it
    before each pass."""
    calls: list = []
    with forward_hooks(combiners, lambda i, inputs, output: calls.append((i, inputs[0], inputs[1]))):
        yield calls


def measure_unroll(model: nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (split, step, group, quantity, value, examples, unrolled_block): after `step` extra steps
    of the unrolled block, each group's mean loss, accuracy and entropy (`examples`: the group's size,
    what the mean is over), and its share of the examples (`examples`: the split's)."""
    require_blocks(model, "unroll")
    sums, sizes, index = {}, {}, None
    model.eval()
    with torch.no_grad():
        for split in settings["splits"]:
            for x, y in batches(data, split, settings, device):
                index = unrollable(model, x) if index is None else index
                with unrolled(model, settings["steps"], settings["scale"], index, every_step=True):
                    per_step = model(x).float().unflatten(0, (settings["steps"] + 1, len(y)))
                members = groups(per_step[0], y, settings["margin"])
                for group, member in members.items():
                    sizes[split, group] = sizes.get((split, group), 0) + int(member.sum())
                for step, logits in enumerate(per_step):
                    add_group_sums(sums, (split, step), logits, y, members)
    rows = [{"split": split, "step": step, "group": group, "quantity": metric,
             "value": total / sizes[split, group] if sizes[split, group] else float("nan"), "examples": sizes[split, group]}
            for (split, step, group, metric), total in sums.items()]
    rows += [{"split": split, "step": step, "group": group, "quantity": "share of examples (%)",
              "value": 100.0 * sizes[split, group] / sizes[split, "all"], "examples": sizes[split, "all"]}
             for split in settings["splits"] for group in ("borderline", "correct", "all") for step in range(settings["steps"] + 1)]
    return pd.DataFrame(rows).assign(unrolled_block=index + 1)


def measure_unroll_blocks(model: nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (split, scale, block, extra_step, unrolled_block, quantity, value, examples): per block
    of the unrolled net (extra_step k > 0: the unrolled block's k-th extra step, numbered L + k
    after the net's L blocks; 0: a trained block), the mean
    over examples of cos(F(h), dL/dh) and of ||F(h)|| / ||h||, unscaled (s = 1) and scaled."""
    combiners = require_blocks(model, "unroll_blocks")
    sums, counts, index = {}, {}, None
    model.eval()
    for scale in dict.fromkeys([1.0, float(settings["scale"])]):
        for split in settings["splits"]:
            counts[split] = 0
            for x, y in batches(data, split, settings, device):
                index = unrollable(model, x) if index is None else index
                with unrolled(model, settings["steps"], scale, index), every_call(combiners) as calls:
                    grads = loss_gradients(model, x, y, lambda: [h for _, h, _ in calls], directions=True)
                counts[split] += len(y)
                runs_of_unrolled = 0
                for (i, h, f), g in zip(calls, grads):
                    extra = 0
                    if i == index:  # its first call is the trained block, the next ones its extra steps
                        extra, runs_of_unrolled = runs_of_unrolled, runs_of_unrolled + 1
                    f, h = f.detach().float(), h.detach().float()
                    cos = cosine(f, g)
                    for quantity, v in (("cos(F(h), dL/dh)", cos), ("||F(h)|| / ||h||", per_example_norm(f) / per_example_norm(h))):
                        key = (split, scale, extra, i + 1 if not extra else len(combiners) + extra, quantity)
                        sums[key] = sums.get(key, 0.0) + v.sum().item()
    return pd.DataFrame([{"split": split, "scale": scale, "block": block, "extra_step": extra, "unrolled_block": index + 1, "quantity": quantity,
                          "value": total / counts[split], "examples": counts[split]} for (split, scale, extra, block, quantity), total in sums.items()])


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
    parts = [f"block {frame['unrolled_block'].iloc[0]} unrolled"]
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
