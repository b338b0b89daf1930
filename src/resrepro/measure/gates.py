"""Paper 000 Figure 3: the mean scaling factors of each residual block of a trained SAS network.

"Averaging over 10,000 experimental examples, we display in Figure 3 the value of alpha, beta and
(1-alpha)(1-beta) in each residual block of the pretrained PreAct-ResNet-110 on CIFAR-10." The
10,000 examples are CIFAR-10's test set; a smaller test set (digits at mini scale) is used whole.
"""

from __future__ import annotations

import pandas as pd
import torch

from ..data.images import normalize
from ..residual import SAS
from .blocks import middle_stage, spearman
from . import register

QUANTITIES = {"a": "alpha", "b": "beta", "gamma": "gamma"}  # SAS.last_gates key -> column value


def sas_blocks(model: torch.nn.Module) -> list[SAS]:
    """The SAS residuals of a model in forward order (the order of `modules()`)."""
    return [m for m in model.modules() if isinstance(m, SAS)]


def measure_gates(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """One row per block and quantity: block (1-based, bottom to top), quantity (alpha, beta,
    gamma = the weight of N(x + F): (1-alpha)(1-beta) when tied), value (its mean over the
    examples), examples (how many). `blocks: middle` keeps the blocks of the middle stage (by their
    width), numbered as in the whole net: "We only show the representative blocks at the middle of
    the model" (paper 000, Sec. 5)."""
    blocks = sas_blocks(model)
    if not blocks:
        raise ValueError("sas_gates: the model has no SAS residual (is the run's variant sas?)")
    if settings["blocks"] not in ("all", "middle"):
        raise ValueError(f"sas_gates: blocks={settings['blocks']!r} is invalid; expected all or middle")
    kept = middle_stage([(b.dim,) for b in blocks]) if settings["blocks"] == "middle" else range(len(blocks))
    x_all, n = data[f"{settings['split']}_x"], min(settings["examples"], len(data[f"{settings['split']}_x"]))
    sums = {(i, q): 0.0 for i in range(len(blocks)) for q in QUANTITIES}
    model.eval()
    with torch.no_grad():
        for start in range(0, n, settings["batch_size"]):
            x = normalize(x_all[start : min(start + settings["batch_size"], n)].to(device).float(), data["mean"], data["std"])
            model(x)
            for i, block in enumerate(blocks):
                for q in QUANTITIES:  # per example: a scalar per example (conv layout)
                    sums[i, q] += block.last_gates[q].float().flatten(1).mean(1).sum().item()
    return pd.DataFrame([{"block": i + 1, "quantity": QUANTITIES[q], "value": total / n, "examples": n}
                         for (i, q), total in sums.items() if i in kept])


def summarize_gates(frame: pd.DataFrame) -> str:
    """The paper's three readings of its Figure 3, measured: how many blocks have alpha > 0.9, and
    the rank correlation with depth (Spearman) of beta (the paper: it grows) and of
    (1-alpha)(1-beta) (the paper: larger in the lower blocks)."""
    by = frame.pivot_table(index="block", columns="quantity", values="value").sort_index()
    return (f"alpha > 0.9 in {(by['alpha'] > 0.9).sum()} of {len(by)} blocks; with depth, beta has Spearman "
            f"rho = {spearman(by['beta'])} and (1-alpha)(1-beta) rho = {spearman(by['gamma'])}")


register("sas_gates", measure=measure_gates, summarize=summarize_gates)
