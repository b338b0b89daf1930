"""Paper 002's dominant gradient flow in real nets (SM D.4.2, Figure 12 (a)).

The loss's gradient G at the final activation a^L ("the outputs of the average layer following the
ReLU", one per channel of the last block's output) flows back to every layer l. Split by where it
comes from: M^l_j is what reaches layer l's output from final channel j alone (G kept on channel
j, zero elsewhere, then back-propagated). A sub-activation of layer l is one channel i's whole
feature map ("One sub-activation is typically viewed as a two-dimensional feature map"). It lies on
the signal-activation paths (SAPs) of the final channels its ID entries lead to: in the simplified
nets D(i) = {j : j mod C_l = i} (one channel in a 64-channel layer; i, i + 16, i + 32, i + 48 from
a 16-channel one: each widening conv's ID entries copy channel c to c and c + C); in the fully
fledged ResNet, whose widening skip pads new channels with zeros, D(i) = {i}. Its gradient flow is
dominant when, averaged over the N positions p of its map, what reaches it along its SAPs
outweighs what all other sources send it together (the text's inequality 5: "The left-hand side
of inequality 5 is the average ratio"):

    (1 / N) sum_p  | sum_{j in D(i)} M^l_j[i, p] |  /  | sum_{j not in D(i)} M^l_j[i, p] |  >  1

The other sources are summed with their signs, as the gradient they make together, so that they
cancel as gradients do: "The ratio measures how much of the gradient of [x_i] is from the gradient
of [a_j] when compared to the sum of all other sources" (SM D.4.1), and "If the distribution is
normal, [the fraction] should be only affected by the dimension of [the layer] by Equation 14 in the
Appendix": Equation 14 is P(|X| > |Y|) for two zero-mean normal variables (Appendix E, Figure 13),
which the other sources' sum is and the sum of their magnitudes is not. Summed as magnitudes, no
channel of a plain net would ever pass (the 63 other final channels' magnitudes outweigh one), while
the paper gives the residual nets' fraction as 1.24 and 0.99 times the plain nets'.

A position that nothing reaches (0 / 0: a ReLU that passes no gradient) adds 0; one reached along
the SAPs alone adds infinity, so its channel passes. The measurement is the fraction of layer l's
channels where it holds (the text's equation 13: "the number of sub-activations in that layer"),
averaged over the examples of one batch ("We further average over all training samples in a
mini-batch"). The last block's own output is not measured: its gradient comes only from itself.
Plain nets have the same ID entries and SAPs, so the same fraction is defined for them.

The paper measures "after the first and the last iteration of training": the measurement reads
the weights a run keeps after its first SGD step (its `epoch` is 1 / steps per epoch) and after
training.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch.nn import functional as F

from .. import catalog
from . import register
from .blocks import batches

FRACTION = "fraction of sub-activations with a dominant gradient flow"


def sap_channel(net: torch.nn.Module, final_channel: int, channels: int) -> int | None:
    """The channel of a layer of `channels` on final channel j's signal-activation path: j mod C
    where widening blocks repeat their channels (the simplified nets), j itself where they pad new
    ones with zeros (the fully fledged ResNet, option A; no channel of a narrower layer for j >= C)."""
    if net.skip_repeats_channels:
        return final_channel % channels
    return final_channel if final_channel < channels else None


def require_blocks(model: torch.nn.Module) -> torch.nn.Module:
    if not hasattr(model, "skip_repeats_channels"):
        raise ValueError(f"dominant_flow: measures paper 002's nets (simple_net, resnet_cifar), not {type(model).__name__}")
    return model


def dominant_fractions(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(blocks - 1,): per block but the last, the share of its output's sub-activations whose
    gradient flow is dominant (the module's docstring), averaged over the examples of x."""
    outputs: list[torch.Tensor] = []

    def keep(module, args, output):  # returns None: the output stays the block's
        outputs.append(output)

    handles = [b.register_forward_hook(keep) for b in net.blocks]
    try:
        with torch.enable_grad():
            loss = F.cross_entropy(net(x), y, reduction="sum")
            *layers, final = outputs
            gradient = torch.autograd.grad(loss, final, retain_graph=True)[0]
            # every source together: the gradient itself (back-propagation is linear in G)
            total = torch.autograd.grad(final, layers, gradient, retain_graph=True)
            along_saps = [torch.zeros_like(h) for h in layers]
            for j in range(final.shape[1]):
                only_j = torch.zeros_like(gradient)
                only_j[:, j] = gradient[:, j]
                for h, flow, sap in zip(layers, torch.autograd.grad(final, layers, only_j, retain_graph=True), along_saps):
                    i = sap_channel(net, j, h.shape[1])
                    if i is not None:
                        sap[:, i] += flow[:, i]
    finally:
        for h in handles:
            h.remove()
    return torch.stack([dominant_share(sap.abs(), (tot - sap).abs()) for tot, sap in zip(total, along_saps)])


def dominant_share(along_saps: torch.Tensor, elsewhere: torch.Tensor) -> torch.Tensor:
    """Of (examples, channels, positions...) gradient magnitudes, along the SAPs and from every other
    source together: the share of channels whose mean ratio over positions exceeds 1, averaged over
    the examples (the module's docstring)."""
    ratio = torch.where(along_saps > 0, along_saps / elsewhere, torch.zeros_like(along_saps))  # x / 0 = inf; 0 / 0 = 0
    return (ratio.flatten(2).mean(dim=2) > 1).float().mean(dim=1).mean()


def measure_dominant_flow(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (block, quantity, value) on the first `examples` training images (one batch)."""
    net = require_blocks(model).eval()
    x, y = next(batches(data, "train", {**settings, "batch_size": settings["examples"]}, device))
    fractions = dominant_fractions(net, x, y).detach().cpu()
    return pd.DataFrame([{"block": i + 1, "quantity": FRACTION, "value": float(v)} for i, v in enumerate(fractions)])


def summarize_dominant_flow(frame: pd.DataFrame) -> str:
    """The mean fraction over the blocks at each snapshot, and its range."""
    parts = []
    for epoch, at in frame.groupby("epoch"):
        by_block = at.groupby("block")["value"].mean()
        parts.append(f"{catalog.snapshot_name(epoch)}: mean fraction {by_block.mean():.3g} over {len(by_block)} blocks "
                     f"(block {by_block.idxmin()} lowest, {by_block.min():.3g}; block {by_block.idxmax()} highest, {by_block.max():.3g})")
    return "; ".join(parts)


register("dominant_flow", measure=measure_dominant_flow, summarize=summarize_dominant_flow, reads="first_step_and_end")
