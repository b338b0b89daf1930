"""Paper 002, Appendix E (Figure 13): the probability of an inequality between two Gaussians.

"Let X ~ N(0, sigma_1^2), Y ~ N(0, sigma_2^2) be two scalar, independent Gaussian variables with
zero mean": D.4.1 asks how often one source of gradient outweighs another, P(|X| > |Y|), as a
function of the ratio r = sigma_1 / sigma_2 of their deviations. The text's own expression
(equation 14) is lost in our copy, but the probability has a closed form: |Y| / |X| is the ratio of
two half-normal variables scaled by 1 / r, a half-Cauchy variable of scale 1 / r, so

    P(|X| > |Y|) = P(|Y| / |X| < 1) = (2 / pi) arctan(r).

It passes 1/2 at r = 1 and P(1 / r) = 1 - P(r): a sigmoid in log r, which is what the text sees
("looks visually similar to a logistic function on a semi-logarithmic plot"). Its logistic
approximation (equation 15) and that approximation's constants are lost too: the figure draws the
closed form and a simulation of it, never a curve we could not derive.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import register

QUANTITY = "P(|X| > |Y|)"


def closed_form(ratio: np.ndarray) -> np.ndarray:
    """P(|X| > |Y|) for X ~ N(0, r^2), Y ~ N(0, 1) (the module's docstring)."""
    return 2.0 / np.pi * np.arctan(ratio)


def simulated(ratio: np.ndarray, samples: int, seed: int) -> np.ndarray:
    """The same probability as the share of `samples` independent pairs where |X| > |Y|, the
    pairs drawn afresh for each ratio from one seeded generator."""
    rng = np.random.default_rng(seed)
    return np.array([np.mean(np.abs(r * rng.standard_normal(samples)) > np.abs(rng.standard_normal(samples))) for r in ratio])


def measure_gaussian_inequality(model, data, settings: dict, device) -> pd.DataFrame:
    """Rows (curve, ratio, quantity, value) at `points` ratios evenly spaced in log from `low` to
    `high`, for the curves "closed form" and "simulated" (a computed figure's cells name them)."""
    ratio = np.geomspace(settings["low"], settings["high"], settings["points"])
    curves = {"closed form": closed_form(ratio), "simulated": simulated(ratio, settings["samples"], settings["seed"])}
    return pd.DataFrame([{"curve": curve, "ratio": float(r), "quantity": QUANTITY, "value": float(v)}
                         for curve, values in curves.items() for r, v in zip(ratio, values)])


def summarize_gaussian_inequality(frame: pd.DataFrame) -> str:
    """Where the curve passes 1/2, and its values at the ends."""
    by_ratio = frame.groupby("ratio")["value"].mean()
    half = by_ratio[by_ratio >= 0.5].index.min()
    return (f"{by_ratio.iloc[0]:.3g} at ratio {by_ratio.index[0]:g}, {by_ratio.iloc[-1]:.3g} at {by_ratio.index[-1]:g}; "
            f"reaches 1/2 at ratio {half:.3g}")


register("gaussian_inequality", measure=measure_gaussian_inequality, summarize=summarize_gaussian_inequality, reads="nothing")
