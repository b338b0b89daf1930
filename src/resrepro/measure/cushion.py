"""Paper 002's noise stability measurements (Sec. 5 and SM D) on its simplified nets.

layer_cushion (Fig. 3): the per-sample layer cushion of Arora et al. 2018 (Definition 4.2). The
cushion of layer i is the largest mu such that mu ||A_i||_F ||phi(x_{i-1})|| <= ||A_i phi(x_{i-1})||
for every training point; per sample it is

    ||A_i a|| / (||A_i||_F ||a||),   a = phi(x_{i-1}), the layer's input (a ReLU's output),

A_i the layer's linear map (its convolution, without bias) and ||A_i||_F the Frobenius norm of
that map as a matrix: each kernel tap's squared weights times the number of output positions at
which the tap falls inside the (zero-padded) input. A residual block's map is its plain form (its
conv plus the skip: 1 added at the ID entries), but its norm is that of its own weights, "after
removing 1 from the ID entries, because the intent of the term is to measure change in the
coefficients" (Sec. 5). A residual layer whose weights are 0 has an infinite cushion; a plain
layer whose weights are the identity on C channels of H x W has 1 / sqrt(C H W).

final_activations (SM D.4, Fig. 10): the distribution of the final activation a^L (the average
pool's output after the last ReLU: "the outputs of the average layer following the ReLU function",
SM D.4.2) and of the loss's gradient G with respect to it, whose entries the text's dominant-flow
analysis takes as normal with mean 0 ("Taking the mean of the distribution of entries of [G] to be
zero simplifies the analysis but is still reasonable because the distribution of the final
activation of real residual networks follows Normal distribution with mean close to zero").
"""

from __future__ import annotations

import pandas as pd
import torch
from torch.nn import functional as F

from ..models.simple_net import SimpleNet, id_entries
from . import register
from .blocks import batches
from .weights import require_simple_net

CUSHION = "layer cushion"
QUANTILES = {"10th percentile": 0.1, "median": 0.5, "90th percentile": 0.9}


def tap_counts(size: tuple[int, int], stride: int, padding: int = 1, k: int = 3) -> torch.Tensor:
    """(k, k): at how many output positions each kernel tap reads a pixel inside an input of
    `size` (the others read the zero padding)."""
    counts = []
    for n in size:
        out = (n + 2 * padding - k) // stride + 1
        counts.append(torch.tensor([sum(0 <= stride * i + tap - padding < n for i in range(out)) for tap in range(k)], dtype=torch.float64))
    return torch.outer(counts[0], counts[1])


def operator_frobenius(weight: torch.Tensor, size: tuple[int, int], stride: int) -> float:
    """||A||_F of the convolution with `weight` (out, in, k, k), padding k // 2, on inputs of `size`."""
    squares = weight.detach().double().pow(2).sum(dim=(0, 1))  # (k, k): each tap over all channel pairs
    counts = tap_counts(size, stride, weight.shape[-1] // 2, weight.shape[-1]).to(squares.device)  # on a GPU: beside the weights
    return squares.mul(counts).sum().sqrt().item()


def block_weights(net: SimpleNet) -> list[torch.Tensor]:
    """Each block's own weights as its forward pass uses them (a diagonal net's mask applied)."""
    return [b.conv.weight if b.mask is None else b.conv.weight * b.mask for b in net.blocks]


def cushions(net: SimpleNet, x: torch.Tensor) -> torch.Tensor:
    """(examples, blocks): each example's cushion at each block (the module's docstring)."""
    inputs: list[torch.Tensor] = []
    handles = [b.register_forward_pre_hook(lambda module, args: inputs.append(args[0])) for b in net.blocks]
    try:
        net(x)
    finally:
        for h in handles:
            h.remove()
    columns = []
    for block, weight, a in zip(net.blocks, block_weights(net), inputs):
        mapped = weight + id_entries(weight) if net.variant == "add" else weight  # the layer's map: its plain form
        out = F.conv2d(a, mapped, None, block.stride, 1)
        norm = operator_frobenius(weight, tuple(a.shape[-2:]), block.stride)  # of its own weights
        columns.append(out.flatten(1).double().norm(dim=1) / (norm * a.flatten(1).double().norm(dim=1)))
    return torch.stack(columns, dim=1)


def measure_layer_cushion(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (split, block, group, quantity, value): per block, quantiles of the per-example cushion
    over the split's first `examples` (examples whose input to the block is all zeros have none)."""
    net = require_simple_net(model).eval()
    rows = []
    for split in settings["splits"]:
        with torch.no_grad():
            per_example = torch.cat([cushions(net, x) for x, _ in batches(data, split, settings, device)]).cpu()
        for block in range(per_example.shape[1]):
            values = per_example[:, block]
            values = values[~values.isnan()]
            for group, q in QUANTILES.items():
                rows.append({"split": split, "block": block + 1, "group": group, "quantity": CUSHION,
                             "value": values.quantile(q).item() if len(values) else float("nan")})
    return pd.DataFrame(rows)


def summarize_layer_cushion(frame: pd.DataFrame) -> str:
    """The median cushion at the first, middle and last block, and its mean over the blocks (a
    layer cushion or an interlayer one)."""
    median = frame[frame["group"] == "median"].groupby("block")["value"].mean().sort_index()
    if median.empty:
        return "no cushion measured"
    middle = median.index[len(median) // 2]
    return (f"median cushion {median.iloc[0]:.3g} at block {median.index[0]}, {median[middle]:.3g} at block {middle}, "
            f"{median.iloc[-1]:.3g} at block {median.index[-1]}; mean over the {len(median)} blocks {median.mean():.3g}")


register("layer_cushion", measure=measure_layer_cushion, summarize=summarize_layer_cushion)


FINAL, GRADIENT = "final activation / its std", "gradient of the loss at the final activation / its std"


def final_activations(net: SimpleNet, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The final activation a^L of each example, "the outputs of the average layer following the
    ReLU function" (SM D.4.2: 64 per example at CIFAR's widths, the classifier's input), and the
    gradient of the example's own cross-entropy with respect to it (summed over the batch, so no
    example's gradient depends on the batch size)."""
    kept: list[torch.Tensor] = []

    def keep(module, args):  # returns None: the classifier reads a^L unchanged
        args[0].retain_grad()
        kept.append(args[0])

    handle = net.fc.register_forward_pre_hook(keep)
    try:
        with torch.enable_grad():
            F.cross_entropy(net(x), y, reduction="sum").backward()
    finally:
        handle.remove()
    return kept[0].detach(), kept[0].grad.detach()


def measure_final_activations(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (part, bin, value) of a histogram of each part, in units of that part's standard
    deviation (bin: the centre of one of `bins` equal bins over [-range, range] std; values beyond
    count in the edge bins), and rows (part, quantity, value) of its mean, std, mean / std,
    skewness and excess kurtosis (a normal distribution: 0 and 0)."""
    net = require_simple_net(model).eval()
    finals, gradients = [], []
    for x, y in batches(data, settings["split"], settings, device):
        final, gradient = final_activations(net, x, y)
        finals.append(final.flatten().double().cpu())
        gradients.append(gradient.flatten().double().cpu())
    bins, reach = settings["bins"], settings["range"]
    width = 2 * reach / bins
    rows = []
    for part, values in ((FINAL, torch.cat(finals)), (GRADIENT, torch.cat(gradients))):
        std = values.std().item()
        scaled = values / std if std > 0 else values
        counts = torch.histc(scaled.clamp(-reach, reach), bins=bins, min=-reach, max=reach)
        rows += [{"part": part, "bin": -reach + (i + 0.5) * width, "value": float(c)} for i, c in enumerate(counts)]
        rows += [{"part": part, "quantity": q, "value": v} for q, v in moments(values).items()]
    return pd.DataFrame(rows)


def moments(values: torch.Tensor) -> dict[str, float]:
    """Mean, standard deviation (n - 1), their ratio, skewness and excess kurtosis (moments of the
    values standardised by that deviation; a normal sample gives about 0 and 0)."""
    mean, std = values.mean().item(), values.std().item()
    if not std > 0:
        return {"mean": mean, "std": std, "mean / std": float("nan"), "skewness": float("nan"), "excess kurtosis": float("nan")}
    centred = (values - mean) / std
    return {"mean": mean, "std": std, "mean / std": mean / std, "skewness": centred.pow(3).mean().item(),
            "excess kurtosis": centred.pow(4).mean().item() - 3.0}


def summarize_final_activations(frame: pd.DataFrame) -> str:
    """Per part: mean / std, skewness and excess kurtosis."""
    stats = frame[frame["quantity"].notna()] if "quantity" in frame else frame.iloc[:0]
    parts = []
    for part, of_part in stats.groupby("part", sort=False):
        value = of_part.set_index("quantity")["value"]
        parts.append(f"{part}: mean / std {value['mean / std']:.3g}, skewness {value['skewness']:.3g}, excess kurtosis {value['excess kurtosis']:.3g}")
    return "; ".join(parts)


register("final_activations", measure=measure_final_activations, summarize=summarize_final_activations)


# Sec. 5: "the per-sample interlayer cushion of plain and residual blocks in commonly used
# networks" (Arora et al. 2018, Definition 4.3): for the map M from a block's input x to its output,
# with Jacobian J at x and h the size of x,
#     sqrt(h) ||J x|| / (||J||_F ||x||).
# ||J||_F is estimated from Rademacher probes v (E ||J v||^2 = ||J||_F^2, exact when J^T J is
# diagonal, e.g. the identity), J v and J x by forward-mode differentiation, one block at a time.
INTERLAYER = "interlayer cushion"


def jacobian_frobenius(block: torch.nn.Module, x: torch.Tensor, probes: int, generator: torch.Generator) -> torch.Tensor:
    """(examples,): each example's ||J||_F for the block's Jacobian at x, from `probes` Rademacher probes."""
    squares = torch.zeros(len(x), dtype=torch.float64, device=x.device)
    for _ in range(probes):
        v = (torch.randint(0, 2, x.shape, generator=generator) * 2 - 1).to(x)
        squares += torch.func.jvp(block, (x,), (v,))[1].flatten(1).double().pow(2).sum(dim=1)
    return (squares / probes).sqrt()


def interlayer_cushions(net: torch.nn.Module, x: torch.Tensor, probes: int, generator: torch.Generator) -> torch.Tensor:
    """(examples, blocks): each example's interlayer cushion of each block."""
    inputs: list[torch.Tensor] = []
    handles = [b.register_forward_pre_hook(lambda module, args: inputs.append(args[0].detach())) for b in net.blocks]
    try:
        net(x)
    finally:
        for h in handles:
            h.remove()
    columns = []
    for block, a in zip(net.blocks, inputs):
        along_x = torch.func.jvp(block, (a,), (a,))[1].flatten(1).double().norm(dim=1)
        size = a[0].numel()
        columns.append(size ** 0.5 * along_x / (jacobian_frobenius(block, a, probes, generator) * a.flatten(1).double().norm(dim=1)))
    return torch.stack(columns, dim=1)


def measure_interlayer_cushion(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (split, block, group, quantity, value): per block, quantiles of the per-example
    interlayer cushion over the split's first `examples`; probes drawn from a fixed seed."""
    if not hasattr(model, "blocks"):
        raise ValueError(f"interlayer_cushion: measures nets of blocks (resnet_cifar, simple_net), not {type(model).__name__}")
    model.eval()
    generator = torch.Generator().manual_seed(0)
    rows = []
    for split in settings["splits"]:
        with torch.no_grad():
            per_example = torch.cat([interlayer_cushions(model, x, settings["probes"], generator) for x, _ in batches(data, split, settings, device)]).cpu()
        for block in range(per_example.shape[1]):
            values = per_example[:, block][~per_example[:, block].isnan()]
            for group, q in QUANTILES.items():
                rows.append({"split": split, "block": block + 1, "group": group, "quantity": INTERLAYER,
                             "value": values.quantile(q).item() if len(values) else float("nan")})
    return pd.DataFrame(rows)


register("interlayer_cushion", measure=measure_interlayer_cushion, summarize=summarize_layer_cushion)
