"""Paper 002's weight statistics (SM C, Table 3; SM D, Table 4), on the snapshots a run kept.

Table 3: "statistics for the weight distributions, including the total weight mass, defined as
the norm of a parameter vector, for (i) all the parameters; (ii) the parameters with magnitude
greater than 0.25, and (iii) all ID entries", of the plain nets' vectors and of the residual
nets' "transferred" vectors (the plain form of a residual net: 1 added at its ID entries,
models/simple_net.equivalent). The norm is the l1 norm: the text's plain ID mass at
initialisation, 67 at depth 32, is what KWI gives for the l1 norm of its 1,120 ID entries (about
66.4 expected; the l2 norm would be about 2.6). The ID share is the text's "72/700": the mass of
the ID entries over the mass of the weights above 0.25.

Table 4: the training risk (mean cross-entropy over the training set, no augmentation) and the
weight-decay term of the cost the optimiser minimised, before and after training. The term is
(lambda / 2) ||w - c||^2 over every parameter, lambda the run's weight decay and c its decay
centre (0; the ID entries for a plain net trained equivalently to a residual one): SGD's decay
lambda * w is this term's gradient. The paper's coefficient is not in our copy of the text
(docs/noise.md), so its terms and ours differ by a constant factor; ratios between nets do not.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch.nn import functional as F

from ..models.simple_net import SimpleNet, equivalent, id_entries
from . import register
from .blocks import batches

RISK = "risk"
DECAY = "decay term"
MEAN, STD = "mean", "std"
MASS_ALL, MASS_LARGE, MASS_ID = "mass, all", "mass, |w| > 0.25", "mass, ID entries"
ID_SHARE = "ID mass / mass |w| > 0.25 (%)"
QUANTITIES = (RISK, DECAY, MEAN, STD, MASS_ALL, MASS_LARGE, MASS_ID, ID_SHARE)


def require_simple_net(model: torch.nn.Module) -> SimpleNet:
    if not isinstance(model, SimpleNet):
        raise ValueError(f"weight_stats: measures paper 002's simplified nets (simple_net), not {type(model).__name__}")
    return model


def risk(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> float:
    """Mean cross-entropy of the model over the training set's first `examples` images."""
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in batches(data, "train", settings, device):
            total += F.cross_entropy(model(x), y, reduction="sum").item()
            count += len(y)
    return total / count


def decay_term(model: torch.nn.Module, weight_decay: float) -> float:
    """(lambda / 2) sum over every parameter of ||w - c||^2, c its decay centre (0 unless the
    model's decay_targets name one)."""
    centres = model.decay_targets() if hasattr(model, "decay_targets") else {}
    squares = sum(((p.detach() - centres[p]) if p in centres else p.detach()).double().pow(2).sum().item() for p in model.parameters())
    return weight_decay / 2 * squares


def plain_form(model: SimpleNet) -> tuple[torch.Tensor, torch.Tensor]:
    """(every parameter, the ID entries) of the net's plain-form vector (a residual net's
    transferred vector: models/simple_net.equivalent), flat, in float64."""
    plain = equivalent(model, "plain")
    vector = torch.cat([p.detach().double().flatten() for p in plain.parameters()])
    ids = torch.cat([id_entries(b.conv.weight).flatten().bool() for b in plain.blocks])
    return vector, torch.cat([b.conv.weight.detach().double().flatten() for b in plain.blocks])[ids]


def plain_form_stats(model: SimpleNet, large: float) -> dict[str, float]:
    """Mean, standard deviation and the l1 masses of the net's plain-form parameter vector, all of
    its parameters."""
    vector, id_values = plain_form(model)
    mass_large = vector.abs()[vector.abs() > large].sum().item()
    mass_id = id_values.abs().sum().item()
    return {MEAN: vector.mean().item(), STD: vector.std().item(), MASS_ALL: vector.abs().sum().item(), MASS_LARGE: mass_large,
            MASS_ID: mass_id, ID_SHARE: 100.0 * mass_id / mass_large if mass_large else float("nan")}


def measure_weight_stats(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (quantity, value) of the module's docstring; the weight decay is the run's (settings
    `weight_decay`, from its recipe: Measurement.recipe_keys)."""
    net = require_simple_net(model)
    net.eval()
    values = {RISK: risk(net, data, settings, device), DECAY: decay_term(net, settings["weight_decay"]),
              **plain_form_stats(net, settings["large"])}
    return pd.DataFrame([{"quantity": q, "value": values[q]} for q in QUANTITIES])


def summarize_weight_stats(frame: pd.DataFrame) -> str:
    """Each quantity at the first and the last snapshot."""
    parts = []
    for quantity in QUANTITIES:
        by_epoch = frame[frame["quantity"] == quantity].set_index("epoch")["value"].sort_index()
        if len(by_epoch):
            parts.append(f"{quantity} {by_epoch.iloc[0]:.4g} at epoch {by_epoch.index[0]} -> {by_epoch.iloc[-1]:.4g} at epoch {by_epoch.index[-1]}")
    return "; ".join(parts)


register("weight_stats", measure=measure_weight_stats, summarize=summarize_weight_stats, reads="snapshots", recipe_keys=("weight_decay",))

# SM C, Figure 7: histograms of the plain-form vector (a residual net's transferred one), all its
# parameters and its ID entries alone, on each snapshot. Values outside the range count in the
# edge bins, so every parameter is in the histogram.
ALL, IDS = "all weights", "ID entries"


def measure_weight_histogram(model: torch.nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (part, bin, value): the count of the plain-form vector's parameters in each of `bins`
    equal bins over [low, high] (bin: its centre), for all parameters and for the ID entries."""
    parts = dict(zip((ALL, IDS), plain_form(require_simple_net(model))))
    low, high, bins = settings["low"], settings["high"], settings["bins"]
    width = (high - low) / bins
    rows = []
    for part, values in parts.items():
        counts = torch.histc(values.clamp(low, high), bins=bins, min=low, max=high)
        rows += [{"part": part, "bin": low + (i + 0.5) * width, "value": float(c)} for i, c in enumerate(counts)]
    return pd.DataFrame(rows)


def summarize_weight_histogram(frame: pd.DataFrame) -> str:
    """At the first and the last snapshot: the mode of the ID entries and how many weights lie in
    bins beyond 0.7 in magnitude (the text: 1 plain weight before training, 26 after)."""
    parts = []
    for epoch in sorted({frame["epoch"].min(), frame["epoch"].max()}):
        at = frame[frame["epoch"] == epoch]
        ids, every = at[at["part"] == IDS], at[at["part"] == ALL]
        mode = ids.loc[ids["value"].idxmax(), "bin"]
        beyond = every.loc[every["bin"].abs() > 0.7, "value"].sum()
        parts.append(f"epoch {epoch}: ID entries' mode {mode:.2f}, {beyond:.0f} weights beyond 0.7 in magnitude")
    return "; ".join(parts)


register("weight_histogram", measure=measure_weight_histogram, summarize=summarize_weight_histogram, reads="snapshots")
