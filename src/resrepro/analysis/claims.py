"""Each paper's claims (config/claims.yaml) and their verdicts for the report's summary.

A claim rests on evidence: table rows (each with its verdict against its baseline, aggregate.py)
and figure checks (figure_checks.judge). Its verdict is unanimous over the evidence that ran:
supported or contradicted only when every piece says so, diverged when every row's runs diverged,
no result when none finished, undecided when no run could show it (figure_checks.undecidable),
inconclusive when they disagree or are inconclusive, not run when
none of it is in this run (its tables and figures were not selected).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from .. import schemas
from ..catalog import ConfigError

# Rows that are baselines or carry no claim of their own are not evidence.
NOT_EVIDENCE = {"baseline", "no claim", ""}


@dataclass(frozen=True)
class Reference:
    """One entry of a claim's evidence: a table (every row with a verdict), one row of it, a
    figure (every check) or one check of it (`number` counts from 1)."""

    kind: str  # "table" or "figure"
    id: str
    label: str | None = None  # a table's row
    number: int | None = None  # a figure's check

    def __str__(self) -> str:
        return self.id + (f": {self.label}" if self.label else f": check {self.number}" if self.number else "")


def parse_reference(text: str, tables: dict, figures: dict, where: str) -> Reference:
    """"sas-t4", "sas-t4: ROW LABEL", "iter-f2" or "iter-f2: check N", checked against the config."""
    ident, _, rest = (part.strip() for part in str(text).partition(":"))
    if ident in tables:
        labels = [row["label"] for row in tables[ident]["rows"]]
        if rest and rest not in labels:
            raise ConfigError(f"{where}: table {ident} has no row {rest!r}; its rows: {labels}")
        return Reference("table", ident, label=rest or None)
    if ident in figures:
        if not rest:
            return Reference("figure", ident)
        checks = figures[ident].get("checks", [])
        word, _, number = rest.partition(" ")
        if word != "check" or not number.isdigit() or not 1 <= int(number) <= len(checks):
            raise ConfigError(f"{where}: {rest!r} is not a check of figure {ident}; it has {len(checks)}: 'check 1' .. 'check {len(checks)}'")
        return Reference("figure", ident, number=int(number))
    raise ConfigError(f"{where}: {ident!r} is neither a table nor a figure of config/tables or config/figures")


def load_claims(source: str | Path | dict, tables: dict, figures: dict, path: str | Path = "") -> dict[str, list[dict]]:
    """The claims by paper, in file order, each {claim, source, evidence: [Reference]}; every
    reference resolves to a table, row, figure or check of the config, or this raises. `source` is
    config/claims.yaml, or what it holds (a resolved plan's `claims`) with `path` naming the file."""
    if isinstance(source, dict):
        papers = source
    else:
        path = Path(source)
        papers = yaml.safe_load(path.read_text()) or {}
    schemas.check(papers, "claims", f"{path}: ")
    known = {entry["paper"] for entry in [*tables.values(), *figures.values()]}
    out: dict[str, list[dict]] = {}
    for paper, claims in papers.items():
        if paper not in known:
            raise ConfigError(f"{path}: unknown paper {paper!r}; the tables and figures are of {sorted(known)}")
        out[paper] = []
        for i, claim in enumerate(claims):
            where = f"{path}: {paper}[{i}]"
            refs = [parse_reference(e, tables, figures, f"{where}.evidence") for e in claim["evidence"]]
            for ref in refs:
                owner = (tables if ref.kind == "table" else figures)[ref.id]["paper"]
                if owner != paper:
                    raise ConfigError(f"{where}.evidence: {ref} is of paper {owner!r}, not {paper!r}")
            out[paper].append({"claim": claim["claim"], "source": claim["source"], "evidence": refs})
    return out


def row_verdict(row: pd.Series) -> str:
    """A table row's verdict as evidence: its own, or "diverged" when it has no result because
    every finished run of it diverged."""
    verdict = row["verdict"] if isinstance(row["verdict"], str) else ""
    if verdict == "no result" and row["n"] == 0 and row["n_diverged"] > 0:
        return "diverged"
    return verdict


def claim_verdict(verdicts: list[str]) -> str:
    """The claim's verdict from its evidence's (None: a piece not in this run). Unanimity:
    supported, contradicted, diverged, no result or undecided when every piece that ran says so; not run when
    none ran; otherwise inconclusive (pieces disagree, or are inconclusive)."""
    ran = [v for v in verdicts if v is not None and v not in NOT_EVIDENCE]
    if not ran:
        return "not run"
    for unanimous in ("supported", "contradicted", "diverged", "no result", "undecided"):
        if all(v == unanimous for v in ran):
            return unanimous
    return "inconclusive"


def ran(ref: Reference, rows: pd.DataFrame, figure_verdicts: dict[str, list]) -> bool:
    """Whether the reference's table or figure is in this run (its rows aggregated, its checks judged)."""
    return ref.id in set(rows["table"]) if ref.kind == "table" else ref.id in figure_verdicts


def evidence_rows(ref: Reference, rows: pd.DataFrame) -> list[pd.Series]:
    """The rows of a table reference (its table, or its one row) whose verdicts are evidence."""
    mine = rows[rows["table"] == ref.id]
    if ref.label is not None:
        mine = mine[mine["label"] == ref.label]
    return [r for _, r in mine.iterrows() if row_verdict(r) not in NOT_EVIDENCE]


def evidence_of(ref: Reference, rows: pd.DataFrame, figure_verdicts: dict[str, list]) -> list[tuple[str, str, str]]:
    """The pieces (source id, "row" or "check", verdict) a reference stands for in this run."""
    if ref.kind == "table":
        return [(ref.id, "row", row_verdict(r)) for r in evidence_rows(ref, rows)]
    checks = figure_verdicts.get(ref.id, [])
    chosen = checks if ref.number is None or not checks else [checks[ref.number - 1]]
    return [(ref.id, "check", v.verdict) for v in chosen]


def unlearned_rows(ref: Reference, rows: pd.DataFrame) -> int:
    """How many of a table reference's evidence rows rest on nets that did not learn at this scale
    (aggregate.unlearned_note): their verdicts say nothing about trained nets."""
    if ref.kind != "table" or "unlearned" not in rows:
        return 0
    return sum(bool(r["unlearned"]) for r in evidence_rows(ref, rows))


def evidence_line(pieces: list[tuple[str, str, str]], not_run: list[str]) -> str:
    """One line: per table or figure, how many of its rows or checks gave each verdict; then the
    tables and figures the claim rests on that this run did not select."""
    parts = []
    for source in dict.fromkeys(s for s, _, _ in pieces):
        mine = [(noun, v) for s, noun, v in pieces if s == source]
        verdicts = [v for _, v in mine]
        noun = mine[0][0] + ("s" if len(mine) != 1 else "")
        counts = ", ".join(f"{verdicts.count(v)} {v}" for v in dict.fromkeys(verdicts))
        parts.append(f"{source}: {counts} of {len(mine)} {noun}")
    if not_run:
        parts.append(f"not in this run: {', '.join(dict.fromkeys(not_run))}")
    return "; ".join(parts)


def summarise(claims: dict[str, list[dict]], rows: pd.DataFrame, figure_verdicts: dict[str, list]) -> dict[str, list[dict]]:
    """Per paper, each claim with its verdict and one line of evidence, for the report."""
    out = {}
    for paper, entries in claims.items():
        out[paper] = []
        for c in entries:
            pieces = [p for ref in c["evidence"] for p in evidence_of(ref, rows, figure_verdicts)]
            not_run = [ref.id for ref in c["evidence"] if not ran(ref, rows, figure_verdicts)]
            unlearned = sum(unlearned_rows(ref, rows) for ref in c["evidence"])
            caveat = f"; {unlearned} of these rows on nets that did not learn at this scale (see their notes)" if unlearned else ""
            out[paper].append({"claim": c["claim"], "source": c["source"],
                               "cited": list(dict.fromkeys((r.id, str(r)) for r in c["evidence"])),  # (id, with the row or check it names)
                               "verdict": claim_verdict([v for _, _, v in pieces]), "evidence": evidence_line(pieces, not_run) + caveat})
    return out
