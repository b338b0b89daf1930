"""Does the reproduction support the paper's claim for a row? A two-sided Welch t-test over seeds.

The paper's claim for a row is the direction of its difference to the baseline row ("better" or
"worse" in the table's metric). The verdict:
- "supported": the reproduced difference has the paper's direction and p < alpha;
- "contradicted": the opposite direction and p < alpha;
- "inconclusive": otherwise, including fewer than two finished seeds on either side.
With the verdict goes the smallest difference that these seeds could resolve (two-sided test at
alpha with 80% power, from the observed spreads), so "inconclusive" says how much was resolvable;
and, the other way round, how many seeds per side the paper's difference would need at those
spreads (`seeds_needed`), and whether the paper's own runs could have resolved it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

ALPHA = 0.05
POWER = 0.8


@dataclass
class Verdict:
    verdict: str
    p_value: float | None
    difference: float | None  # reproduced mean(row) - mean(baseline)
    resolvable: float | None  # smallest |difference| resolvable with these seeds
    reason: str


def compare(row: list[float], baseline: list[float], paper_row: float, paper_baseline: float, higher_is_better: bool | None) -> Verdict:
    paper_diff = paper_row - paper_baseline
    if paper_diff == 0:
        return Verdict("no claim", None, None, None, "the paper reports the same value as its baseline")
    if len(row) < 2 or len(baseline) < 2:
        return Verdict("inconclusive", None, difference_of_means(row, baseline), None, "needs at least 2 finished seeds on each side")
    diff, p, resolvable = welch(row, baseline)
    if higher_is_better is None:  # a measured quantity (a weight mass): larger or smaller, not better or worse
        direction = "larger" if paper_diff > 0 else "smaller"
    else:
        direction = "better" if (paper_diff > 0) == higher_is_better else "worse"
    if p < ALPHA and (diff > 0) == (paper_diff > 0):
        return Verdict("supported", p, diff, resolvable, f"the paper reports {direction}; reproduced the same direction")
    if p < ALPHA:
        return Verdict("contradicted", p, diff, resolvable, f"the paper reports {direction}; reproduced the opposite")
    return Verdict("inconclusive", p, diff, resolvable, f"the paper reports {direction}; difference not significant at {ALPHA}")


def welch(row: list[float], baseline: list[float]) -> tuple[float, float, float]:
    """(mean(row) - mean(baseline), Welch's two-sided p, the smallest difference these seeds resolve);
    at least 2 values a side."""
    a, b = np.asarray(row, float), np.asarray(baseline, float)
    diff = float(a.mean() - b.mean())
    if a.var(ddof=1) + b.var(ddof=1) == 0:  # identical runs on both sides (e.g. a deterministic tie): nothing to test
        return diff, 1.0 if diff == 0 else 0.0, 0.0
    return diff, float(stats.ttest_ind(a, b, equal_var=False).pvalue), welch_detectable(float(a.var(ddof=1)), len(a), float(b.var(ddof=1)), len(b))


def compare_new(row: list[float], baseline: list[float], higher_is_better: bool) -> Verdict:
    """A row no paper reports (the tables beyond the papers): "better" or "worse" than its baseline
    where Welch's test separates them at ALPHA, else "no difference"."""
    if len(row) < 2 or len(baseline) < 2:
        return Verdict("inconclusive", None, difference_of_means(row, baseline), None, "needs at least 2 finished seeds on each side")
    diff, p, resolvable = welch(row, baseline)
    if p >= ALPHA:
        return Verdict("no difference", p, diff, resolvable, f"no paper value; the difference from the baseline is not significant at {ALPHA}")
    verdict = "better" if (diff > 0) == higher_is_better else "worse"
    return Verdict(verdict, p, diff, resolvable, f"no paper value; {verdict} than the baseline at {ALPHA}")


def welch_detectable(va: float, na: int, vb: float, nb: int) -> float:
    """The smallest difference of means that a two-sided Welch test at ALPHA detects with POWER,
    for na and nb seeds whose variances are va and vb (Welch-Satterthwaite degrees of freedom)."""
    se2 = va / na + vb / nb
    df = se2**2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
    return float((stats.t.ppf(1 - ALPHA / 2, df) + stats.t.ppf(POWER, df)) * math.sqrt(se2))


def compare_same(row: list[float | None], baseline: list[float | None], paper_row: float, paper_baseline: float) -> Verdict:
    """A row that the paper reports as its baseline's equal up to a small discrepancy (paper 002's
    equivalently trained nets, SM B: "some small discrepancies as a result of rounding errors").
    The lists hold each seed's value (None: no result); seed s of both rows saw the same batches,
    so they are compared seed by seed. Supported if every seed's difference is at most the paper's
    own discrepancy |paper_row - paper_baseline|; contradicted if one is larger."""
    pairs = [(a, b) for a, b in zip(row, baseline) if a is not None and b is not None]
    tolerance = abs(paper_row - paper_baseline)
    if not pairs:
        return Verdict("inconclusive", None, None, None, "needs a seed with a result in both rows")
    differences = [a - b for a, b in pairs]
    largest = max(abs(d) for d in differences)
    mean = float(np.mean(differences))
    if largest <= tolerance:
        return Verdict("supported", None, mean, None, f"the paper reports the same up to {tolerance:.4g}; the largest difference of a "
                       f"seed is {largest:.3g}")
    return Verdict("contradicted", None, mean, None, f"the paper reports the same up to {tolerance:.4g}; a seed differs by {largest:.3g}")


def difference_of_means(row, baseline) -> float | None:
    if not row or not baseline:
        return None
    return float(np.mean(row) - np.mean(baseline))


def paired_resolvable(differences: list[float]) -> float | None:
    """The smallest mean of paired differences (one per seed: a figure's two cells, seed against
    seed) that a two-sided paired t-test at ALPHA would detect with POWER, at the observed spread;
    None under two seeds, where there is no spread to judge by."""
    if len(differences) < 2:
        return None
    d = np.asarray(differences, float)
    df = len(d) - 1
    return float((stats.t.ppf(1 - ALPHA / 2, df) + stats.t.ppf(POWER, df)) * d.std(ddof=1) / math.sqrt(len(d)))

def detectable(variances: tuple[float, float], n: int) -> float:
    """welch_detectable with n seeds per side: df = (va + vb)^2 (n - 1) / (va^2 + vb^2)."""
    return welch_detectable(variances[0], n, variances[1], n)


def _variances(row: list[float], baseline: list[float]) -> tuple[float, float]:
    return float(np.var(row, ddof=1)), float(np.var(baseline, ddof=1))


def seeds_needed(row: list[float], baseline: list[float], effect: float, most: int = 1000) -> float | None:
    """Seeds per side that would resolve `effect` (the paper's difference) at the spreads these
    seeds show: the smallest n >= 2 with detectable(n) <= |effect|; inf beyond `most`; None when
    a side has fewer than 2 seeds (no spread) or there is no effect to resolve."""
    if len(row) < 2 or len(baseline) < 2 or effect == 0:
        return None
    variances = _variances(row, baseline)
    if sum(variances) == 0:  # no spread at all: the smallest test resolves any difference
        return 2
    if detectable(variances, most) > abs(effect):
        return math.inf
    low, high = 2, most  # detectable falls as n grows (a smaller standard error, more degrees of freedom):
    while low < high:    # bisect for the first n that resolves the effect
        middle = (low + high) // 2
        if detectable(variances, middle) <= abs(effect):
            high = middle
        else:
            low = middle + 1
    return low


def paper_could_resolve(paper_runs: int | None, row: list[float], baseline: list[float], effect: float, same_data: bool) -> bool | None:
    """Whether the paper's `paper_runs` runs per side resolve its own `effect` at the spreads these
    seeds show (one run: never, there is no spread to test). None when the paper does not say how
    many runs, when these seeds show no spread, or when they ran on other data than the paper's
    (`same_data` false: digits' spread says nothing of CIFAR's)."""
    if paper_runs is None or effect == 0:
        return None
    if paper_runs < 2:
        return False
    if not same_data or len(row) < 2 or len(baseline) < 2:
        return None
    variances = _variances(row, baseline)
    return sum(variances) == 0 or detectable(variances, paper_runs) <= abs(effect)
