"""Paper 002, SM D.4.1 (Figure 11 (d) and (e)): the fraction of dominant gradient flow in the trivial case, simulated.

"We first consider the trivial case in which all convolutional kernels are [1 x 1] and all the
activations are 1D vector." A net of n entries a layer: layer k maps a^{k-1} to a^k = D_k W_k a^{k-1}.
- Residual nets: "We model each weight matrix as an [n x n] square matrix and [W = I + N] where
  ... each entry of [N] is an i.i.d. normal random variable with mean 0 and variance [sigma^2],
  which is similar to the weights initialization of real networks": the residual nets' HMWI
  (models/simple_net.py), std 1 / (k^2 c) with the trivial case's k = 1 and c = n: 1 / n.
- Plain nets: "Each weight matrix can be modeled as an [n x n] square matrix with each entry
  following a normal distribution": the plain nets' KWI, std sqrt(2 / (k^2 c)) = sqrt(2 / n).
  The fraction does not depend on it: scaling every W_k scales every M_j alike (and a ratio of
  them not at all).
- ReLUs: "Suppose each diagonal of [D] follows a Bernoulli distribution with probability [p] of
  being 1 ... and we fix all [p] to be [p]", drawn afresh for each layer and each draw.
- The final gradients: "suppose each diagonal entry of [diag(G)] is an i.i.d. normal random
  variable that follows [N(0, s^2)]".

The quantity is the project's real measurement (measure/dominant_flow.py) on these matrices. M_j
is what reaches layer l from final entry j alone: the final gradient kept on entry j, zero
elsewhere, back-propagated through D_k and W_k^T of each layer k above l,

    M = W_{l+1}^T D_{l+1} ... W_L^T D_L diag(G),   M_j its column j.

Entry i lies on final entry i's signal-activation path (the identity path), so its ratio (the
text's equation 6) is |M_i[i]| / |sum_{j != i} M_j[i]|: "how much of the gradient of [a^l_i] is
from the gradient of [a^L_i] when compared to the sum of all other sources", the sources summed
with their signs (measure/dominant_flow.py says why: the text's Equation 14). As in the real
measurement, 0 / 0 (no gradient reaches i) counts 0 and x / 0 (only its own path does) infinity.
The fraction (equation 13) is the share of the n entries whose ratio exceeds 1 (inequality 5),
averaged over `draws` independent nets. Only the `layers` = L - l layers above the measured layer
matter: those below it take no part in M.

The text's extreme cases are what tests/test_trivial_flow.py checks by hand: p = 0 ("all the [D]
are zero matrices. Then no gradients can be back-propagated and [M] is zero matrix"): fraction 0;
the residual net with no noise and p = 1: M = diag(G), fraction 1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import register

FRACTION = "fraction of sub-activations with a dominant gradient flow"  # as measure/dominant_flow.py's
DEVIATION = "fraction minus its mean over the gradient scales"
CURVES = {"residual, simulated": True, "plain, simulated": False}  # curve -> residual


def weight_std(n: int, residual: bool) -> float:
    """The std of the noise N (residual: W = I + N, HMWI 1 / n) or of W itself (plain: KWI sqrt(2 / n))."""
    return 1.0 / n if residual else float(np.sqrt(2.0 / n))


def flow_matrix(weights: np.ndarray, masks: np.ndarray, gradient: np.ndarray) -> np.ndarray:
    """(draws, n, n): M[d, i, j], what reaches entry i of the measured layer from final entry j, of
    `weights` (layers, draws, n, n) and `masks` (layers, draws, n) ordered from the layer just above
    the measured one (l + 1) to the last (L), and the final `gradient` (draws, n)."""
    draws, n = gradient.shape
    flow = np.zeros((draws, n, n))
    flow[:, np.arange(n), np.arange(n)] = gradient  # diag(G): column j holds final entry j's gradient alone
    for w, d in zip(weights[::-1], masks[::-1]):  # back through layer L first
        flow = np.swapaxes(w, 1, 2) @ (d[:, :, None] * flow)  # W_k^T D_k
    return flow


def dominant_fraction(flow: np.ndarray) -> float:
    """Of M (draws, n, n): the share of entries whose ratio |M[i, i]| / |sum_{j != i} M[i, j]|
    exceeds 1 (0 / 0 counts 0, x / 0 infinity), averaged over the draws."""
    along_path = np.diagonal(flow, axis1=1, axis2=2)
    own, elsewhere = np.abs(along_path), np.abs(flow.sum(axis=2) - along_path)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(own > 0, own / elsewhere, 0.0)
    return float((ratio > 1).mean())


def draw_net(rng: np.random.Generator, n: int, layers: int, p: float, gradient_std: float, draws: int, residual: bool,
             noise_std: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`draws` independent trivial-case nets: weights (layers, draws, n, n), masks and the final gradient."""
    std = weight_std(n, residual) if noise_std is None else noise_std
    weights = std * rng.standard_normal((layers, draws, n, n))
    if residual:
        weights += np.eye(n)
    masks = (rng.random((layers, draws, n)) < p).astype(float)  # Bernoulli(p): p = 0 none, p = 1 every one
    gradient = gradient_std * rng.standard_normal((draws, n))
    return weights, masks, gradient


def simulated_fraction(rng: np.random.Generator, n: int, layers: int, p: float, gradient_std: float, draws: int, residual: bool,
                       noise_std: float | None = None) -> float:
    """The fraction of dominant gradient flow over `draws` nets drawn from `rng`."""
    return dominant_fraction(flow_matrix(*draw_net(rng, n, layers, p, gradient_std, draws, residual, noise_std)))


def curves(settings: dict, along: str, points: np.ndarray) -> pd.DataFrame:
    """Rows (curve, `along`, quantity, value): both nets' fraction at each point, every point and
    net its own draws from one seeded generator (the points are independent simulations)."""
    rng = np.random.default_rng(settings["seed"])
    rows = []
    for x in points:
        for curve, residual in CURVES.items():
            at = {"p": settings.get("p"), "gradient_std": settings.get("gradient_std"), along: float(x)}
            value = simulated_fraction(rng, settings["n"], settings["layers"], at["p"], at["gradient_std"], settings["draws"], residual)
            rows.append({"curve": curve, along: float(x), "quantity": FRACTION, "value": value})
    return pd.DataFrame(rows)


def measure_trivial_flow_scale(model, data, settings: dict, device) -> pd.DataFrame:
    """Figure 11 (d): the fraction against the std s of the final gradients, at `points` values
    evenly spaced in log from `low` to `high`, p fixed; with each curve's deviation from its own
    mean over the scales (the text: "the red lines are horizontal")."""
    frame = curves(settings, "gradient_std", np.geomspace(settings["low"], settings["high"], settings["points"]))
    deviation = frame.assign(quantity=DEVIATION, value=frame["value"] - frame.groupby("curve")["value"].transform("mean"))
    return pd.concat([frame, deviation], ignore_index=True)


def measure_trivial_flow_p(model, data, settings: dict, device) -> pd.DataFrame:
    """Figure 11 (e): the fraction against p, at `points` values evenly spaced from 0 to 1, s fixed."""
    return curves(settings, "p", np.linspace(0.0, 1.0, settings["points"]))


def summarize_trivial_flow_scale(frame: pd.DataFrame) -> str:
    """The fraction at the smallest and the largest scale, and its range over the scales."""
    by_scale = frame[frame["quantity"] == FRACTION].groupby("gradient_std")["value"].mean()
    return (f"fraction {by_scale.iloc[0]:.3g} at gradient std {by_scale.index[0]:g}, {by_scale.iloc[-1]:.3g} at {by_scale.index[-1]:g}; "
            f"range over the scales {by_scale.max() - by_scale.min():.2g}")


def summarize_trivial_flow_p(frame: pd.DataFrame) -> str:
    """The fraction at the ends and the middle of p, and where it is largest."""
    by_p = frame[frame["quantity"] == FRACTION].groupby("p")["value"].mean()
    middle = by_p.index[len(by_p) // 2]
    return (f"fraction {by_p.iloc[0]:.3g} at p {by_p.index[0]:g}, {by_p[middle]:.3g} at p {middle:g}, {by_p.iloc[-1]:.3g} at p {by_p.index[-1]:g}; "
            f"largest {by_p.max():.3g} at p {by_p.idxmax():g}")


register("trivial_flow_scale", measure=measure_trivial_flow_scale, summarize=summarize_trivial_flow_scale, reads="nothing")
register("trivial_flow_p", measure=measure_trivial_flow_p, summarize=summarize_trivial_flow_p, reads="nothing")
