"""Does a figure show what its paper claims? The checks a figure's entry lists, on figures.csv.

A figure's claim is a shape (negative in every block, falling with depth, larger in one net than
in another), not one number, so each entry may list `checks:`, one per part of the claim:

    checks:
      - {claim: "negative in every block", source: 'Sec. 4.1: "..."', test: below, value: 0, select: {quantity: "cos(F(h), dL/dh)"}}

- `source` says where the paper says it and quotes the sentence the check makes testable.

- `select` keeps the rows whose columns have these values (a list: any of them; "max"/"min":
  the column's largest/smallest; {at_least: x}, {at_most: x}; {first_after: x}: the smallest value
  above x, e.g. the first snapshot after initialisation); `cells` keeps these cells (their labels);
  `mean_over` averages these columns away first (e.g. the blocks, for a trend over epochs).
- `test` is one of TESTS, each true or false on one seed's rows (below).
The verdict: "supported" when the test holds for every seed measured, "contradicted" when it
fails for every one, "inconclusive" when seeds disagree, "no result" without a measured seed, and
"undecided" when the runs cannot show what the check tests: a cell it reads holds nets that did not
learn (aggregate.unlearned_note: a claim about trained nets says nothing of them), its rows
average over fewer examples than its `min_examples` (e.g. a handful of borderline examples, where
one example decides the test), or the test is undefined on them (a curve of one point, e.g. a
stage of one block at a small depth; a ratio over zero).
The paper draws each figure from one run, so one seed can support a shape; the report prints how
many seeds were measured beside the verdict. The evidence is the test on the mean over seeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import stats

ID_COLUMNS = ("figure", "cell", "label", "run", "seed", "value", "examples")  # not a grouping of the data


@dataclass
class FigureVerdict:
    claim: str
    verdict: str
    seeds_holding: int
    seeds: int
    evidence: str
    resolvable: float | None = None  # an `ordered` check of two cells: the smallest difference these seeds resolve


class Undecidable(Exception):
    """The rows cannot decide the test: a curve with one point along the axis it runs along, a
    ratio over zero. The verdict is "undecided" with this reason, never "contradicted"."""


@dataclass(frozen=True)
class Test:
    function: Callable  # (rows of one seed, **args) -> (holds, evidence)
    args: tuple[str, ...]  # required arguments
    optional: tuple[str, ...] = ()


TESTS: dict[str, Test] = {}


def _test(name: str, args: tuple[str, ...], optional: tuple[str, ...] = ()):
    def decorator(function):
        TESTS[name] = Test(function, args, optional)
        return function

    return decorator


def _groups(rows, exclude: tuple[str, ...] = ()) -> list[str]:
    """The columns that tell the rows' curves apart (cell, split, quantity, ...), those in use."""
    return [c for c in rows.columns if c not in (*ID_COLUMNS, *exclude) and c != "label" and rows[c].notna().any()] + ["label"]


def _where(columns: list[str], key) -> str:
    """Which curve: its cell, then e.g. "split test, epoch 6" (the quantity by its name alone)."""
    named = dict(zip(columns, key if isinstance(key, tuple) else (key,)))
    label = named.pop("label")
    parts = [f"{v}" if c == "quantity" else f"{c} {v:g}" if isinstance(v, float) else f"{c} {v}" for c, v in named.items()]
    return ", ".join([label, *parts])


def _share(mask) -> float:
    return float(mask.mean())


@_test("below", ("value",), ("share",))
def below(rows, value: float, share: float = 1.0):
    """At least `share` of the values are below `value` (every one by default)."""
    inside = rows["value"] < value
    top = rows.loc[rows["value"].idxmax()]
    return _share(inside) >= share, f"{_share(inside):.0%} below {value:g}; largest {top['value']:.3g} ({top['label']})"


@_test("above", ("value",), ("share",))
def above(rows, value: float, share: float = 1.0):
    """At least `share` of the values are above `value` (every one by default)."""
    inside = rows["value"] > value
    low = rows.loc[rows["value"].idxmin()]
    return _share(inside) >= share, f"{_share(inside):.0%} above {value:g}; smallest {low['value']:.3g} ({low['label']})"


def _every_curve(rows, along: str, margin: Callable):
    """Whether margin(values along `along`) > 0 in every curve; the curve with the smallest
    margin as (margin, its two compared values, which curve)."""
    holds, worst, columns = True, None, _groups(rows, (along,))
    for key, curve in rows.groupby(columns, dropna=False, sort=False):
        values = curve.sort_values(along)["value"].astype(float)
        if curve[along].nunique() < 2:
            raise Undecidable(f"{_where(columns, key)} has one point along {along}: no curve to read")
        m, a, b = margin(values)
        holds &= m > 0
        if worst is None or m < worst[0]:
            worst = (m, a, b, _where(columns, key))
    return holds, worst


def _ends(values):
    return values.iloc[-1] - values.iloc[0], values.iloc[0], values.iloc[-1]


def _first_and_rest(values):
    return values.iloc[0] - values.iloc[1:].mean(), values.iloc[0], values.iloc[1:].mean()


def _negated(margin):
    return lambda values: (-margin(values)[0], *margin(values)[1:])


@_test("rises", ("along",))
def rises(rows, along: str):
    """In every curve, the value at the last point along `along` exceeds that at the first."""
    holds, (_, first, last, where) = _every_curve(rows, along, _ends)
    return holds, f"{'least rise' if holds else 'does not rise'}: {first:.3g} to {last:.3g} along {along} ({where})"


@_test("falls", ("along",))
def falls(rows, along: str):
    """In every curve, the value at the last point along `along` is below that at the first."""
    holds, (_, first, last, where) = _every_curve(rows, along, _negated(_ends))
    return holds, f"{'least fall' if holds else 'does not fall'}: {first:.3g} to {last:.3g} along {along} ({where})"


@_test("varies", ("along", "value"))
def varies(rows, along: str, value: float):
    """In every curve, the largest and the smallest value along `along` differ by more than
    `value`: "the blue line in Figure 11 (e) is not horizontal"."""
    holds, (_, low, high, where) = _every_curve(rows, along, lambda values: (values.max() - values.min() - value, values.min(), values.max()))
    return holds, f"{'least range' if holds else 'range within ' + format(value, 'g')}: {low:.3g} to {high:.3g} along {along} ({where})"


@_test("first_largest", ("along",))
def first_largest(rows, along: str):
    """In every curve, the first point along `along` exceeds the mean of the others."""
    holds, (_, first, rest, where) = _every_curve(rows, along, _first_and_rest)
    return holds, f"first {along} {first:.3g} against {rest:.3g} for the rest ({where})"


@_test("first_smallest", ("along",))
def first_smallest(rows, along: str):
    """In every curve, the first point along `along` is below the mean of the others."""
    holds, (_, first, rest, where) = _every_curve(rows, along, _negated(_first_and_rest))
    return holds, f"first {along} {first:.3g} against {rest:.3g} for the rest ({where})"


@_test("peak_between", ("along", "low", "high"))
def peak_between(rows, along: str, low: float, high: float):
    """In every curve, the point along `along` where the value is largest (a histogram's mode)
    lies between `low` and `high`."""
    columns, modes = _groups(rows, (along,)), []
    for key, curve in rows.groupby(columns, dropna=False, sort=False):
        modes.append((float(curve.loc[curve["value"].idxmax(), along]), _where(columns, key)))
    holds = all(low <= mode <= high for mode, _ in modes)
    return holds, "; ".join(f"{along} {mode:.3g} ({where})" for mode, where in modes) + f": {'all' if holds else 'not all'} in [{low:g}, {high:g}]"


@_test("ordered", ("cells",))
def ordered(rows, cells: list[str]):
    """The mean value of each cell exceeds that of the next, in the order `cells` lists them."""
    means = [float(rows.loc[rows["label"] == c, "value"].mean()) for c in cells]
    holds = all(a > b for a, b in zip(means, means[1:]))
    return holds, " > ".join(f"{c} {m:.3g}" for c, m in zip(cells, means)) if holds else \
        ", ".join(f"{c} {m:.3g}" for c, m in zip(cells, means))


@_test("falls_more", ("cells", "along"))
def falls_more(rows, cells: list[str], along: str):
    """The first cell's curve falls more from its first point along `along` to its last than the
    second cell's does, as a ratio first / last (each curve the mean over the cell's other
    columns): "with x + F the gradients are basically the same in every block; with SAS more
    gradient goes to the lower blocks". Values must be positive (norms)."""
    ratios = []
    for cell in cells:
        curve = _positive_curve(rows, cell, along)
        ratios.append(float(curve.iloc[0] / curve.iloc[-1]))
    holds = ratios[0] > ratios[1]
    return holds, f"first {along} / last: " + ", ".join(f"{c} {r:.3g}" for c, r in zip(cells, ratios))


def _positive_curve(rows, cell: str, along: str):
    """One cell's values along `along`, each the mean over the cell's other columns; a curve of
    one point or with a value <= 0 has no ratio to read (Undecidable)."""
    curve = rows[rows["label"] == cell].groupby(along)["value"].mean().sort_index()
    if len(curve) < 2:
        raise Undecidable(f"{cell} has {len(curve)} point{'s' if len(curve) != 1 else ''} along {along}: no curve to read")
    if curve.min() <= 0:
        raise Undecidable(f"{cell} has a value of {curve.min():.3g} along {along}: a ratio of norms needs positive values")
    return curve


@_test("spread_ordered", ("cells", "along"))
def spread_ordered(rows, cells: list[str], along: str):
    """The first cell's values spread more across `along` than the second's, as the ratio of the
    largest to the smallest (each the mean over the cell's other columns): "simply scaling the skip
    causes severe gradient malformation ... With normalization ... the gradient malformation is
    generally mitigated". Values must be positive (norms)."""
    spreads = []
    for cell in cells:
        curve = _positive_curve(rows, cell, along)
        spreads.append(float(curve.max() / curve.min()))
    holds = spreads[0] > spreads[1]
    return holds, f"largest / smallest across the {along}s: " + ", ".join(f"{c} {r:.3g}" for c, r in zip(cells, spreads))


@_test("ratio_between", ("cells", "low", "high"))
def ratio_between(rows, cells: list[str], low: float, high: float):
    """The first cell's mean value over the second's lies between `low` and `high`: "2xSkip+LN is
    approximately twice 1xSkip"."""
    first, second = (float(rows.loc[rows["label"] == c, "value"].mean()) for c in cells)
    if not second > 0:
        raise Undecidable(f"{cells[1]}'s mean is {second:.3g}: no ratio over it")
    ratio = first / second
    holds = low <= ratio <= high
    return holds, f"{cells[0]} / {cells[1]}: {first:.3g} / {second:.3g} = {ratio:.3g}, {'' if holds else 'not '}in [{low:g}, {high:g}]"


@_test("ordered_at_each", ("cells", "along"), ("share",))
def ordered_at_each(rows, cells: list[str], along: str, share: float = 1.0):
    """At least `share` of the points along `along` (every one by default) have the first cell's
    value above the second's: "the red distribution is to the right of the blue, for all the
    layers with the exception of 2"."""
    first, second = (rows[rows["label"] == c].groupby(along)["value"].mean() for c in cells)
    both = first.index.intersection(second.index)
    if not len(both):
        raise Undecidable(f"{cells[0]} and {cells[1]} share no point along {along}")
    above = first[both] > second[both]
    worst = (first[both] - second[both]).idxmin() if len(both) else None
    evidence = f"{cells[0]} above {cells[1]} at {above.sum()} of {len(both)} {along}s" + (
        f"; least margin at {along} {worst:g}: {first[worst]:.3g} against {second[worst]:.3g}" if worst is not None else "")
    return _share(above) >= share, evidence


def select(data, check: dict):
    """The rows a check reads: its cells, its `select`, then the means over `mean_over`."""
    rows = data
    if check.get("cells"):
        rows = rows[rows["label"].isin(check["cells"])]
    for column, wanted in (check.get("select") or {}).items():
        if column not in rows.columns:
            raise ValueError(f"check {check['claim']!r}: select names {column!r}, not a column of this figure's data ({', '.join(rows.columns)})")
        values = rows[column]
        if wanted in ("max", "min"):
            rows = rows[values == getattr(values, wanted)()]
        elif isinstance(wanted, dict) and "first_after" in wanted:
            rows = rows[values == values[values > wanted["first_after"]].min()]
        elif isinstance(wanted, dict):  # {at_least: x} and/or {at_most: x}
            rows = rows[(values >= wanted.get("at_least", -float("inf"))) & (values <= wanted.get("at_most", float("inf")))]
        else:
            rows = rows[values.isin(wanted if isinstance(wanted, list) else [wanted])]
    if check.get("mean_over"):
        keys = [c for c in rows.columns if c not in ("value", "examples", *check["mean_over"]) and rows[c].notna().any()]
        rows = rows.groupby(keys, as_index=False, sort=False, dropna=False)["value"].mean()
    return rows


def judge(data, check: dict, unlearned: dict[str, str] | None = None) -> FigureVerdict:
    """One check on a figure's rows of figures.csv (every seed): the verdict and its evidence.
    `unlearned`: the cells (labels) whose nets did not learn, with what their note says."""
    test = TESTS[check["test"]]
    args = {k: check[k] for k in (*test.args, *test.optional) if k in check}
    rows = select(data, check) if len(data) else data
    if rows.empty:
        return FigureVerdict(check["claim"], "no result", 0, 0, "no measured run has these rows")
    # the seeds that measured every cell the check reads (a cell's missing run: not that seed)
    needed = check.get("cells") or sorted(set(rows["label"]))
    seeds = sorted(s for s, r in rows.groupby("seed") if set(needed) <= set(r["label"]))
    if seeds and (why := undecidable(rows[rows["seed"].isin(seeds)], needed, check, unlearned or {})):
        return FigureVerdict(check["claim"], UNDECIDED, 0, len(seeds), why)
    keys = [c for c in rows.columns if c not in ("value", "seed", "run", "examples") and rows[c].notna().any()]
    mean = rows[rows["seed"].isin(seeds)].groupby(keys, as_index=False, sort=False, dropna=False)["value"].mean()
    try:
        holding = sum(bool(test.function(rows[rows["seed"] == s].drop(columns="seed"), **args)[0]) for s in seeds)
        evidence = test.function(mean, **args)[1] if seeds else "no seed measured every cell"
    except Undecidable as why:
        return FigureVerdict(check["claim"], UNDECIDED, 0, len(seeds), f"not judged: {why}")
    verdict = "no result" if not seeds else "supported" if holding == len(seeds) else "contradicted" if holding == 0 else "inconclusive"
    return FigureVerdict(check["claim"], verdict, holding, len(seeds), evidence, resolvable_difference(rows, check, seeds))


UNDECIDED = "undecided"


def undecidable(rows, cells: list[str], check: dict, unlearned: dict[str, str]) -> str | None:
    """Why these rows cannot decide the check (None when they can): a cell whose nets did not
    learn, or fewer examples behind a value than the check's `min_examples`."""
    if failed := [c for c in cells if unlearned.get(c)]:
        return f"not judged: {failed[0]}: {unlearned[failed[0]]}"
    if "min_examples" in check and "examples" in rows and rows["examples"].notna().any():
        fewest = int(rows["examples"].min())
        if fewest < check["min_examples"]:
            return (f"not judged: a value here is a mean over {fewest} example{'s' if fewest != 1 else ''}, fewer than the {check['min_examples']} "
                    "the check needs for one example not to decide it")
    return None


def resolvable_difference(rows, check: dict, seeds: list) -> float | None:
    """For a comparison of two cells (`ordered`), the smallest difference of their means that the
    measured seeds resolve (analysis/stats.paired_resolvable on each seed's difference): what a
    verdict from these seeds can and cannot tell apart. None for other tests and under two seeds."""
    if check["test"] != "ordered" or len(check.get("cells") or []) != 2:
        return None
    first, second = check["cells"]
    differences = [float(r.loc[r["label"] == first, "value"].mean() - r.loc[r["label"] == second, "value"].mean())
                   for s, r in rows[rows["seed"].isin(seeds)].groupby("seed")]
    return stats.paired_resolvable(differences)


def check_keys(check: dict) -> tuple[set[str], set[str]]:
    """(required, allowed) keys of a check, for the config's validation."""
    test = TESTS[check["test"]]
    return {"claim", "source", "test", *test.args}, {"claim", "source", "test", "select", "cells", "mean_over", "min_examples", *test.args, *test.optional}
