"""Measurements per residual block: paper 003's (Jastrzebski et al. 2018, Sec. 4.1-4.2), and the
gradient norms of papers 000 and 001.

A residual block computes h_{i+1} = h_i + F_i(h_i); here h_i is what the block's residual
combiner receives as its skip (the block's input, or its projection where a ResNet block changes
width) and F_i(h_i) what it receives as its branch. Hooks on the combiners (residual.Residual)
read both, so any registered architecture is measured without knowing its layout. Blocks are
numbered 1..L from the input, in forward order.

- l2_ratio (Fig. 2): ||F_i(h_i)||_2 / ||h_i||_2 per example, averaged over examples.
- block_drop (Fig. 3): accuracy (%) when block i alone is dropped (its branch set to zero, so
  y = h_i for x + F), each block in turn; block 0 is the whole net. The paper drops blocks "on
  validation set", so its default split is the held-out one.
- grad_cosine (Fig. 4): cos(F_i(h_i), dL/dh_i) per example, averaged over examples, where L is the
  example's cross-entropy and dL/dh_i its gradient with respect to h_i in the trained net (through
  the block and its skip). Negative: the block moves h against the loss's gradient, as a step of
  gradient descent on h would.

- grad_norm (paper 000 Fig. 4, paper 001 Fig. 3): ||dL/dy_i||_2 per example, averaged over
  examples, where y_i is block i's output (the next block's input) and L the example's
  cross-entropy. `blocks: middle` keeps the blocks of the middle stage (the middle one of the
  distinct output shapes, in forward order: blocks 19-36 of a ResNet-110), as both papers show.
- skip_weight (paper 001, "Learning lambda"): the norm of wSkip+LN's learned skip vector w per block.

Each is computed on the first `examples` images of each of its `splits` (training images unaugmented),
with the net in eval mode (BN's running statistics), so every example is measured on its own.
"""

from __future__ import annotations

from contextlib import contextmanager

import pandas as pd
import torch

from ..data.images import normalize
from ..residual import Residual
from . import register


def residual_blocks(model: torch.nn.Module) -> list[Residual]:
    """The residual combiners of a model in forward order (the order of `modules()`)."""
    return [m for m in model.modules() if isinstance(m, Residual)]


@contextmanager
def forward_hooks(modules: list[torch.nn.Module], on_call):
    """While open, every forward call of modules[i] calls `on_call(i, inputs, output)`."""

    def hook_for(i):
        def hook(module, inputs, output):
            on_call(i, inputs, output)
        return hook

    handles = [m.register_forward_hook(hook_for(i)) for i, m in enumerate(modules)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def _hooked(blocks: list[Residual], keep):
    """While open, `seen[i]` holds `keep(inputs, output)` of block i's latest forward pass."""
    seen: list = [None] * len(blocks)

    def record(i, inputs, output):
        seen[i] = keep(inputs, output)

    with forward_hooks(blocks, record):
        yield seen


def recording(blocks: list[Residual]):
    """While open, `seen[i]` holds block i's (h, F) from the latest forward pass."""
    return _hooked(blocks, lambda inputs, output: (inputs[0], inputs[1]))


def recording_outputs(blocks: list[Residual]):
    """While open, `seen[i]` holds block i's output y_i from the latest forward pass."""
    return _hooked(blocks, lambda inputs, output: output)


def middle_stage(shapes: list[tuple[int, ...]]) -> list[int]:
    """The 0-based indices of the blocks whose output shape is the middle one of the distinct
    shapes in forward order (one stage: all of them)."""
    distinct = list(dict.fromkeys(shapes))
    middle = distinct[(len(distinct) - 1) // 2]
    return [i for i, shape in enumerate(shapes) if shape == middle]


@contextmanager
def dropped(block: Residual):
    """While open, the block's branch is replaced by zeros: the block passes its skip through."""
    handle = block.register_forward_pre_hook(lambda module, inputs: (inputs[0], torch.zeros_like(inputs[1])))
    try:
        yield
    finally:
        handle.remove()


def batches(data: dict, split: str, settings: dict, device: torch.device):
    """(normalized images, labels) of the split's first `examples`, in batches of `batch_size`."""
    x_all, y_all = data[f"{split}_x"], data[f"{split}_y"]
    n = min(settings["examples"], len(x_all))
    for start in range(0, n, settings["batch_size"]):
        stop = min(start + settings["batch_size"], n)
        yield normalize(x_all[start:stop].to(device).float(), data["mean"], data["std"]), y_all[start:stop].to(device)


def per_example_norm(t: torch.Tensor) -> torch.Tensor:
    return t.flatten(1).norm(dim=1)


def require_blocks(model: torch.nn.Module, name: str) -> list[Residual]:
    blocks = residual_blocks(model)
    if not blocks:
        raise ValueError(f"{name}: the model has no residual block")
    return blocks


def _rows(sums: dict, counts: dict, quantity: str) -> list[dict]:
    return [{"split": split, "block": block, "quantity": quantity, "value": total / counts[split], "examples": counts[split]}
            for (split, block), total in sums.items()]


def measure_l2_ratio(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (split, block, quantity, value, examples): the mean over examples of ||F(h)|| / ||h||."""
    blocks = require_blocks(model, "l2_ratio")
    sums, counts = {}, {}
    model.eval()
    with torch.no_grad(), recording(blocks) as seen:
        for split in settings["splits"]:
            counts[split] = 0
            for x, y in batches(data, split, settings, device):
                model(x)
                counts[split] += len(y)
                for i, (h, f) in enumerate(seen):
                    ratio = per_example_norm(f.float()) / per_example_norm(h.float())
                    sums[split, i + 1] = sums.get((split, i + 1), 0.0) + ratio.sum().item()
    return pd.DataFrame(_rows(sums, counts, "||F(h)|| / ||h||"))


def measure_block_drop(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (split, block, quantity, value, examples): accuracy (%) with block i dropped; block 0
    is the whole net."""
    blocks = require_blocks(model, "block_drop")
    sums, counts = {}, {}
    model.eval()
    with torch.no_grad():
        for split in settings["splits"]:
            counts[split] = 0
            for x, y in batches(data, split, settings, device):
                counts[split] += len(y)
                for i in range(len(blocks) + 1):
                    if i == 0:
                        logits = model(x)
                    else:
                        with dropped(blocks[i - 1]):
                            logits = model(x)
                    sums[split, i] = sums.get((split, i), 0.0) + 100.0 * (logits.argmax(1) == y).sum().item()
    return pd.DataFrame(_rows(sums, counts, "accuracy (%), block dropped (0: none)"))


def loss_gradients(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, recorded, directions: bool = False) -> tuple[torch.Tensor, ...]:
    """dL/dt for each tensor t that the forward pass records (`recorded()` lists them after it), L
    the summed cross-entropy: each example's loss has its own gradient, as eval-mode BN mixes no
    examples. Weights get no gradient (autograd.grad, not backward). `directions`: each example's
    gradient scaled by a positive factor of its own (logit_gradient), for a cosine."""
    with torch.enable_grad():
        logits = model(x)
        return torch.autograd.grad(logits, recorded(), grad_outputs=logit_gradient(logits, y, directions))


def logit_gradient(logits: torch.Tensor, y: torch.Tensor, directions: bool = False) -> torch.Tensor:
    """dL/dz of the cross-entropy, softmax(z) - onehot(y), in float64 with the true class's entry
    written as minus the other classes' probabilities: 1 - p_y itself rounds to 0 once the margin
    passes about 17 (float32) or 37 (float64), and the gradient, which the cosines read, with it.
    `directions`: each example's row scaled to unit length, so that its direction, all a cosine
    reads, survives the float32 backward pass however confident the example."""
    p = torch.softmax(logits.detach().double(), dim=1)
    others = p.scatter(1, y[:, None], 0.0)
    grad = others.scatter(1, y[:, None], -others.sum(1, keepdim=True))
    if directions:
        grad = grad / grad.norm(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    return grad.to(logits.dtype)


def cosine(f: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Per example, cos(f, g) in float64, 0 where either is 0. torch's cosine_similarity clamps the
    norms' product at 1e-8, which would shrink the cosine of a confident example's tiny gradient."""
    f, g = f.detach().double().flatten(1), g.detach().double().flatten(1)
    norms = f.norm(dim=1) * g.norm(dim=1)
    return torch.where(norms > 0, (f * g).sum(1) / norms.clamp_min(torch.finfo(torch.float64).tiny), 0.0)





def measure_grad_cosine(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (split, block, quantity, value, examples): the mean over examples of cos(F(h), dL/dh)."""
    blocks = require_blocks(model, "grad_cosine")
    sums, counts = {}, {}
    model.eval()
    with recording(blocks) as seen:
        for split in settings["splits"]:
            counts[split] = 0
            for x, y in batches(data, split, settings, device):
                grads = loss_gradients(model, x, y, lambda: [h for h, _ in seen], directions=True)
                counts[split] += len(y)
                for i, ((_, f), g) in enumerate(zip(seen, grads)):
                    cos = cosine(f, g)
                    sums[split, i + 1] = sums.get((split, i + 1), 0.0) + cos.sum().item()
    return pd.DataFrame(_rows(sums, counts, "cos(F(h), dL/dh)"))


def splits_of(frame: pd.DataFrame) -> list[str]:
    """The frame's splits, training first (the aggregate's mean over seeds sorts them by name)."""
    present = list(dict.fromkeys(frame["split"]))
    return sorted(present, key=lambda s: (s != "train", s != "test", present.index(s)))


def measure_grad_norm(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (split, block, quantity, value, examples): the mean over examples of ||dL/dy|| at each
    block's output; `blocks: middle` keeps the middle stage's blocks, numbered as in the whole net."""
    blocks = require_blocks(model, "grad_norm")
    if settings["blocks"] not in ("all", "middle"):
        raise ValueError(f"grad_norm: blocks={settings['blocks']!r} is invalid; expected all or middle")
    sums, counts, kept = {}, {}, None
    model.eval()
    with recording_outputs(blocks) as seen:
        for split in settings["splits"]:
            counts[split] = 0
            for x, y in batches(data, split, settings, device):
                grads = loss_gradients(model, x, y, lambda: list(seen))
                if kept is None:
                    every = list(range(len(blocks)))
                    kept = middle_stage([tuple(g.shape[1:]) for g in grads]) if settings["blocks"] == "middle" else every
                counts[split] += len(y)
                for i in kept:
                    sums[split, i + 1] = sums.get((split, i + 1), 0.0) + per_example_norm(grads[i].float()).sum().item()
    return pd.DataFrame(_rows(sums, counts, "||dL/dy||"))


def measure_skip_weight(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (block, quantity, value): the norm ||w||_2 of each wSkip+LN block's learned skip vector
    and its root mean square ||w||_2 / sqrt(dim) (paper 001: "the final norm of a sampled w in R^32
    at middle layers is 1.34 ... 0.24 on average"); `blocks: middle` keeps the blocks whose w has
    the middle one of the sizes (R^32 in a ResNet of 16/32/64 channels). Reads no data."""
    blocks = require_blocks(model, "skip_weight")
    with_w = [(i, b.w.detach().float()) for i, b in enumerate(blocks) if isinstance(getattr(b, "w", None), torch.Tensor)]
    if not with_w:
        raise ValueError("skip_weight: the model has no block with a learned skip weight w (is the run's variant wskip_ln?)")
    if settings["blocks"] not in ("all", "middle"):
        raise ValueError(f"skip_weight: blocks={settings['blocks']!r} is invalid; expected all or middle")
    if settings["blocks"] == "middle":
        keep = set(middle_stage([tuple(w.shape) for _, w in with_w]))
        with_w = [pair for k, pair in enumerate(with_w) if k in keep]
    return pd.DataFrame([{"block": i + 1, "quantity": quantity, "value": value}
                         for i, w in with_w
                         for quantity, value in (("||w||", w.norm().item()), ("||w|| / sqrt(dim)", (w.norm() / w.numel() ** 0.5).item()))])


def _by_block(frame: pd.DataFrame, split: str) -> pd.Series:
    return frame[frame["split"] == split].groupby("block")["value"].mean().sort_index()


def spearman(series: pd.Series) -> str:
    """The rank correlation of a curve's values with its index (depth), as the summaries print it:
    "+0.52"; "none (one block)" or "none (constant)" where no correlation exists, rather
    than scipy's nan."""
    from scipy import stats  # here, not at import: the workflow imports this module to parse every dry run

    if len(series) < 2:
        return f"none (one {series.index.name or 'point'})"
    if series.nunique() < 2:
        return "none (constant)"
    return f"{stats.spearmanr(series.index, series.values).statistic:+.2f}"


def _per_split(frame: pd.DataFrame, describe) -> str:
    """`describe(values by block)` for each split of the frame, training first, joined by "; "."""
    return "; ".join(f"{split}: {describe(_by_block(frame, split))}" for split in splits_of(frame))


def summarize_l2_ratio(frame: pd.DataFrame) -> str:
    """The paper's reading of Fig. 2: the first blocks change h most, higher blocks little, falling with depth."""

    def describe(r: pd.Series) -> str:
        upper = r[r.index > len(r) // 2]
        return f"block 1 {r.iloc[0]:.2f}, upper half median {upper.median():.2f}, Spearman rho with depth {spearman(r)}"

    return _per_split(frame, describe)


def summarize_block_drop(frame: pd.DataFrame) -> str:
    """The paper's reading of Fig. 3: dropping the first blocks is catastrophic, most higher blocks cost little."""

    def describe(acc: pd.Series) -> str:
        whole, drops = acc.loc[0], acc.drop(index=0)
        worst = drops.idxmin()
        return (f"whole net {whole:.1f}%; dropping block 1 {drops.iloc[0]:.1f}%, the worst block {worst} "
                f"{drops.loc[worst]:.1f}%; {(whole - drops < 1.0).sum()} of {len(drops)} blocks cost under 1 point")

    return _per_split(frame, describe)


def summarize_grad_cosine(frame: pd.DataFrame) -> str:
    """The paper's reading of Fig. 4: negative in every block, most negative in the higher blocks."""

    def describe(c: pd.Series) -> str:
        third = max(1, len(c) // 3)
        return (f"negative in {(c < 0).sum()} of {len(c)} blocks; mean {c.iloc[:third].mean():+.3f} "
                f"in the lowest third, {c.iloc[-third:].mean():+.3f} in the highest")

    return _per_split(frame, describe)


def summarize_grad_norm(frame: pd.DataFrame) -> str:
    """The papers' readings: paper 000, the same in every block for x + F and larger in the lower
    blocks with SAS; paper 001, how large and how even the norms are across the blocks shown."""

    def describe(g: pd.Series) -> str:
        return (f"blocks {g.index[0]}-{g.index[-1]}, mean {g.mean():.3g}, lowest block / highest "
                f"{g.iloc[0] / g.iloc[-1]:.2f}, Spearman rho with depth {spearman(g)}")

    return _per_split(frame, describe)


def summarize_skip_weight(frame: pd.DataFrame) -> str:
    """The paper's numbers for its sampled w: the norm and its size per dimension, over the blocks shown."""
    by = frame.pivot_table(index="block", columns="quantity", values="value").sort_index()
    return (f"blocks {by.index[0]}-{by.index[-1]}: ||w|| {by['||w||'].mean():.2f} on average (from {by['||w||'].min():.2f} "
            f"to {by['||w||'].max():.2f}), {by['||w|| / sqrt(dim)'].mean():.2f} per dimension")


register("l2_ratio", measure=measure_l2_ratio, summarize=summarize_l2_ratio)
register("block_drop", measure=measure_block_drop, summarize=summarize_block_drop)
register("grad_cosine", measure=measure_grad_cosine, summarize=summarize_grad_cosine)
register("grad_norm", measure=measure_grad_norm, summarize=summarize_grad_norm)
register("skip_weight", measure=measure_skip_weight, summarize=summarize_skip_weight)
