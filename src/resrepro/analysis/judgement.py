"""The verdicts the aggregate does not decide, as tidy tables for the report, which only renders.

- figure_checks.csv: each figure's checks (figure_checks.judge) on its measured data, or on its
  difference curves where its entry lists `differences:`.
- figure_differences.csv: those difference curves (per seed, one cell's rows minus another's), and
  difference_cells.csv: what each shows, as figure_cells.csv says it of a measured cell.
- claims.csv: each paper's claims (config/claims.yaml) with their verdicts over the rows' verdicts
  (rows.csv) and the checks' (analysis/claims.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path

import pandas as pd

from . import figure_checks
from .claims import load_claims, summarise

CHECK_COLUMNS = ["figure", "check", *(f.name for f in fields(figure_checks.FigureVerdict))]
DIFFERENCE_CELL_COLUMNS = ["figure", "label", "n", "n_runs", "summary"]
CLAIM_COLUMNS = ["paper", "claim", "source", "cited", "verdict", "evidence"]
# The columns of figures.csv that tell a cell's rows apart, not the point they are at.
CELL_COLUMNS = ("cell", "label", "run", "value", "examples")


def judge_figures(figures: dict, data: pd.DataFrame, cells: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Every measured figure's checks, difference curves and difference cells (figures.csv and
    figure_cells.csv as the aggregate wrote them)."""
    checks, differences, difference_cells = [], [], []
    for figure_id in judged_figures(figures, cells):
        entry = figures[figure_id]
        fdata = data[data["figure"] == figure_id]
        mine = cells[cells["figure"] == figure_id]
        unlearned = {label: note for label, note in zip(mine["label"], mine.get("unlearned", [""] * len(mine))) if isinstance(note, str) and note}
        if entry.get("differences"):  # the figure shows its cells' differences, and its checks read them
            fdata = figure_differences(fdata, entry["differences"])
            differences.append(fdata)
            difference_cells += [{"figure": figure_id, **cell} for cell in difference_summaries(fdata, entry, mine)]
            # a difference of two cells is no more learned than either of them
            unlearned = {d["label"]: unlearned.get(d["of"]) or unlearned.get(d["minus"]) for d in entry["differences"]
                         if unlearned.get(d["of"]) or unlearned.get(d["minus"])}
        checks += [{"figure": figure_id, "check": number, **asdict(figure_checks.judge(fdata, check, unlearned))}
                   for number, check in enumerate(entry.get("checks", []), 1)]
    return {
        "figure_checks": pd.DataFrame(checks, columns=CHECK_COLUMNS),
        "figure_differences": pd.concat(differences, ignore_index=True) if differences else data.iloc[:0],
        "difference_cells": pd.DataFrame(difference_cells, columns=DIFFERENCE_CELL_COLUMNS),
    }


def judged_figures(figures: dict, cells: pd.DataFrame) -> list[str]:
    """The figures this run measured (figure_cells.csv), in their files' order; a figure the
    pipeline does not reproduce has no cells."""
    measured = set(cells["figure"])
    return [f for f, entry in figures.items() if f in measured and not entry.get("not_reproduced")]


def figure_differences(data: pd.DataFrame, differences: list[dict]) -> pd.DataFrame:
    """A figure's difference curves (its entry's `differences:`): per seed, the rows of cell `of`
    minus those of cell `minus` at the same point (epoch, quantity, ...), the absolute difference
    where `abs` is set. Same seed against same seed: paper 002 compares nets that saw the same
    batches (noise-f6) and the gap between two nets over training (noise-f9b)."""
    keys = [c for c in data.columns if c not in CELL_COLUMNS and data[c].notna().any()]  # figure, seed, epoch, quantity, ...
    frames = []
    for i, difference in enumerate(differences):
        pairs = data[data["label"] == difference["of"]].merge(data[data["label"] == difference["minus"]], on=keys, suffixes=("", "_minus"))
        value = pairs["value"] - pairs["value_minus"]
        frames.append(pairs[keys].assign(cell=-1 - i, label=difference["label"],
                                         run=pairs["run"] + " - " + pairs["run_minus"], value=value.abs() if difference.get("abs") else value))
    if not frames:
        return data.iloc[:0]
    out = pd.concat(frames, ignore_index=True)
    for column in keys:  # figures.csv reads an epoch back as a float (other figures' rows leave it empty)
        if out[column].dtype.kind == "f" and out[column].notna().all() and (out[column] % 1 == 0).all():
            out[column] = out[column].astype(int)
    return out.reindex(columns=data.columns)


def difference_summaries(differences: pd.DataFrame, entry: dict, fcells: pd.DataFrame) -> list[dict]:
    """Each difference curve as a cell of the figure: the seeds it pairs (of the fewer runs its two
    cells planned) and what their mean shows."""
    from .. import measure

    summarize = measure.get(fcells["measurement"].iloc[0]).summarize
    planned = fcells.set_index("label")["n_runs"]
    out = []
    for d in entry["differences"]:
        rows = differences[differences["label"] == d["label"]]
        keys = [c for c in rows.columns if c not in ("figure", "cell", "label", "run", "seed", "value", "examples") and rows[c].notna().any()]
        summary = summarize(rows.groupby(keys, as_index=False)["value"].mean()) if len(rows) else ""
        out.append({"label": d["label"], "n": rows["seed"].nunique(), "n_runs": int(min(planned[d["of"]], planned[d["minus"]])), "summary": summary})
    return out


def verdicts_by_figure(frame: pd.DataFrame, out: dict | None = None) -> dict[str, list[figure_checks.FigureVerdict]]:
    """The figure_checks table as each figure's verdicts, in its checks' order, added to `out`."""
    out = {} if out is None else out
    for _, r in frame.iterrows():
        resolvable = None if r["resolvable"] is None or r["resolvable"] == "" or pd.isna(r["resolvable"]) else float(r["resolvable"])
        out.setdefault(r["figure"], []).append(figure_checks.FigureVerdict(
            r["claim"], r["verdict"], int(r["seeds_holding"]), int(r["seeds"]), r["evidence"], resolvable))
    return out


def read_figure_checks(path: Path) -> dict[str, list[figure_checks.FigureVerdict]]:
    """figure_checks.csv as each judged figure's verdicts."""
    return verdicts_by_figure(pd.read_csv(path, keep_default_na=False))


def judge_claims(plan: dict, rows: pd.DataFrame, checked: dict[str, list]) -> pd.DataFrame:
    """Each paper's claims, in the claims file's order, with their verdicts and evidence lines."""
    stated = load_claims(plan["claims"], plan["tables"], plan["figures"], plan["claims_source"]) if plan["claims"] else {}
    out = [{"paper": paper, **claim, "cited": json.dumps(claim["cited"])}
           for paper, claims in summarise(stated, rows, checked).items() for claim in claims]
    return pd.DataFrame(out, columns=CLAIM_COLUMNS)


def read_claims(path: Path) -> dict[str, list[dict]]:
    """claims.csv as each paper's claims, each with the (id, reference) pairs it cites."""
    frame = pd.read_csv(path, keep_default_na=False)
    out: dict[str, list[dict]] = {}
    for _, r in frame.iterrows():
        out.setdefault(r["paper"], []).append({**{c: r[c] for c in CLAIM_COLUMNS if c != "paper"},
                                               "cited": [tuple(pair) for pair in json.loads(r["cited"])]})
    return out


def judge(plan: dict, agg_dir: Path) -> dict[str, pd.DataFrame]:
    """The judge's tidy tables from the aggregate's (agg_dir) and the resolved plan."""
    cells = pd.read_csv(agg_dir / "figure_cells.csv", keep_default_na=False)
    out = judge_figures(plan["figures"], pd.read_csv(agg_dir / "figures.csv"), cells)
    # a measured figure without checks is in this run all the same
    checked = verdicts_by_figure(out["figure_checks"], {f: [] for f in judged_figures(plan["figures"], cells)})
    out["claims"] = judge_claims(plan, pd.read_csv(agg_dir / "rows.csv"), checked)
    return out
