"""The HTML report: every table of every paper, the paper's number beside the reproduced one.

Jinja lays out; every number and verdict comes from the tidy tables of the aggregate and the judge
(analysis/aggregate.py, analysis/judgement.py) and the papers' values in the resolved plan: this
module decides nothing, it formats and draws. Figures are embedded as base64 PNG so the file is
self-contained.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd

from .. import files, layout, provenance
from ..analysis.aggregate import DIGITS, UNFINISHED
from ..analysis.judgement import read_claims, read_figure_checks
from ..experiments import BEYOND, METRICS
from . import figures

# The four papers, in the report's order (docs/design.md: sas 000, rskip 001, noise 002, iter 003).
PAPERS = {
    "sas": "Self-Adaptive Scaling for Learnable Residual Structure (SAS), CoNLL 2019",
    "rskip": "Liu et al., Rethinking Skip Connection with Layer Normalization in Transformers and ResNets, COLING 2020",
    "noise": "Identity Connections in Residual Nets Improve Noise Stability",
    "iter": "Jastrzebski et al., Residual Connections Encourage Iterative Inference, ICLR 2018",
    # opt-in (experiments.BEYOND): what came after the papers, on their recipes; no paper values
    "beyond": "Beyond the papers: Pre-LN, ReZero, SkipInit, LayerScale, DeepNorm and Admin beside the papers' winners",
}


# The data each dataset name stands for, for the captions that say what a table really ran on.
DATASET_NAMES = {
    "cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "iwslt15_en_vi": "IWSLT15 EN-VI", "wmt14_en_de": "WMT14 EN-DE",
    "wmt14_en_fr": "WMT14 EN-FR", "mscoco": "MSCOCO",
    "digits": "8x8 digits (scikit-learn's, 1,297 train / 500 test images)",
    "synthetic": "a synthetic translation corpus (data/synthetic_translation.py)",
    "scenes": "synthetic 32x32 scenes with five captions each (data/scenes.py)",
}


def _listed(items) -> str:
    items = list(dict.fromkeys(str(i) for i in items))
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def ran_as(trows: pd.DataFrame, table_runs: pd.DataFrame, scale: str) -> str:
    """One sentence per table: the data, the models and the training this scale really ran for it,
    each against what the paper used, and the seeds per row; so that no number is read as the
    paper's setting (e.g. "8x8 digits standing for CIFAR-10; preact_resnet32 for the paper's depth 110")."""
    data = [f"{DATASET_NAMES.get(run, run)}" + ("" if set(group) == {run} else f" standing for {_listed(DATASET_NAMES.get(p, p) for p in group)}")
            for run, group in trows.groupby("dataset", sort=False)["paper_dataset"]]
    models = [f"{arch} for the paper's {_listed(group)}" for arch, group in trows.groupby("arch", sort=False)["paper_model"]]
    lengths = _listed(table_runs["train_length"].dropna()) if "train_length" in table_runs and table_runs["train_length"].notna().any() else ""
    seeds = sorted(set(int(n) for n in trows["n_runs"]))
    count = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
    parts = ["; ".join(data), "; ".join(models), *([lengths] if lengths else []), *scored_part(table_runs),
             f"{count} seed{'s' if seeds[-1] != 1 else ''} per row"]
    return f"Ran at {scale} scale on " + "; ".join(parts) + "."


def scored_part(table_runs: pd.DataFrame) -> list[str]:
    """Where a recipe scored only the first test sentences (test_sentences), how many of how many:
    a BLEU on 32 sentences is not the test set's."""
    if "test_sentences" not in table_runs:
        return []
    cut = table_runs.dropna(subset=["test_sentences"])
    cut = cut[cut["test_sentences"] < cut["test_split_sentences"]]
    return [f"scored on the first {_listed(f'{int(n):,} of {int(m):,}' for n, m in zip(cut['test_sentences'], cut['test_split_sentences']))}"
            " test sentences"] if len(cut) else []


def figure_ran_as(fdata: pd.DataFrame, runs: pd.DataFrame, scale: str) -> str:
    """A figure's counterpart of `ran_as`: the data and nets its measured runs really are, the
    examples each measurement read (figures.csv's `examples`) and the seeds per cell, so that the
    caption's setting (the paper's: "10,000 training examples") is not read as this run's."""
    measured = runs[runs["run"].isin(set(fdata["run"]))]
    if measured.empty:
        return ""
    parts = [_listed(DATASET_NAMES.get(d, d) for d in measured["dataset"]), _listed(measured["arch"])]
    if "examples" in fdata and fdata["examples"].notna().any():  # a split's size: its largest count (a group's is a part of it)
        counts = fdata.groupby("split")["examples"].max() if "split" in fdata and fdata["split"].notna().any() else fdata["examples"]
        parts.append(f"{_listed(f'{int(n):,}' for n in sorted(counts.dropna().unique(), reverse=True))} examples a measurement")
    seeds = sorted(fdata.groupby("label")["run"].nunique())
    count = f"{seeds[0]}" if seeds[0] == seeds[-1] else f"{seeds[0]}-{seeds[-1]}"
    parts.append(f"{count} seed{'s' if seeds[-1] != 1 else ''} per cell")
    return f"Ran at {scale} scale on " + "; ".join(parts) + "."


def drawn_data_key(drawn: pd.DataFrame) -> str:
    """What a figure draws, whatever its id and cell labels: the same runs, quantities, points and
    values give the same key."""
    data = drawn.drop(columns=["figure", "cell", "label"])
    data = data[sorted(data.columns)]
    return hashlib.sha256(data.sort_values(list(data.columns)).to_csv(index=False).encode()).hexdigest()


def with_repeats(claim: dict, repeats: dict[str, str]) -> dict:
    """A claim's summary whose evidence line also says which of its figures repeat another's runs
    at this scale (`repeats`: figure -> the figure it repeats): counted twice, not two pieces."""
    said = [f"{r} repeats {repeats[r]}" for r in dict.fromkeys(ref for ref, _ in claim["cited"]) if r in repeats]
    return {**claim, "evidence": claim["evidence"] + f" ({'; '.join(said)}: the same runs at this scale)"} if said else claim


def fmt(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def fmt_p(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.3f}" if value >= 0.001 else "<0.001"


def data_uri(png: bytes | None) -> str | None:
    return None if png is None else "data:image/png;base64," + base64.b64encode(png).decode()


class _DrawHere:
    """ProcessPoolExecutor's submit, drawing at once in this process (one worker, or no fork)."""

    def submit(self, fn, *args) -> Future:
        done = Future()
        done.set_result(fn(*args))
        return done

    def shutdown(self) -> None:
        pass


def drawing_pool(workers: int):
    """Where the report's figures are drawn: drawing is most of the report's time and each figure
    is independent, so with several workers they are drawn in forked processes (the report is the
    pipeline's last job: the other cores are idle)."""
    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    return _DrawHere()


def _drawn(future: Future | None) -> str | None:
    return None if future is None else data_uri(future.result())


# The analysis's tidy tables a reader can download from the report itself (data: links).
TIDY_TABLES = ("rows.csv", "runs.csv", "curves.csv", "figures.csv", "figure_cells.csv", "figure_checks.csv", "claims.csv")


def downloads(agg_dir: Path) -> list[dict]:
    """Each tidy table of the aggregate as a download link: its name, lines and data URI."""
    out = []
    for name in TIDY_TABLES:
        path = agg_dir / name
        if path.exists():
            data = path.read_bytes()
            out.append({"name": name, "lines": max(data.count(b"\n") - 1, 0), "uri": "data:text/csv;base64," + base64.b64encode(data).decode()})
    return out


def run_links(run_ids: list[str], results_dir: Path | None, report_dir: Path) -> list[tuple[str, str]]:
    """(seed, relative link to the run's folder) for each run of a row; none without a results folder."""
    if results_dir is None:
        return []
    return [(layout.seed_label(run), os.path.relpath(results_dir / run, report_dir) + "/") for run in run_ids]


def build_context(agg_dir: Path, plan: dict, recipe: dict, note: str = "", results_dir: Path | None = None, report_dir: Path = Path("."),
                  workers: int = 1) -> dict:
    """The report's context from the aggregate's tidy tables and the scale's resolved plan
    (experiments.resolved_plan: its tables, figures, claims and each row's runs)."""
    pool = drawing_pool(workers)
    try:
        context = _context(agg_dir, plan, recipe, note, results_dir, report_dir, pool)
        for paper in context["papers"]:  # each figure drawn (in a worker): its data URI
            for section in paper["sections"]:
                section["figure"] = _drawn(section["figure"])
            for figure in paper["figures"]:
                figure["image"] = _drawn(figure.get("image"))
        context["paper_against_reproduced"] = _drawn(context["paper_against_reproduced"])
        return context
    finally:
        pool.shutdown()


def _context(agg_dir: Path, plan: dict, recipe: dict, note: str, results_dir: Path | None, report_dir: Path, pool) -> dict:
    """build_context's context, each figure a Future of its PNG from `pool`."""
    rows = pd.read_csv(agg_dir / "rows.csv")
    runs = pd.read_csv(agg_dir / "runs.csv")
    curves = pd.read_csv(agg_dir / "curves.csv")
    scale, tables, figure_config = plan["scale"], plan["tables"], plan["figures"]
    runs_by_row = {(r["table"], r["label"]): r["runs"] for r in plan["rows"]}

    costs = gpu_costs(agg_dir / "gpu_hours.csv")
    samples_path = agg_dir / "caption_samples.csv"
    samples = pd.read_csv(samples_path, keep_default_na=False) if samples_path.exists() else pd.DataFrame(columns=["table"])
    papers = []
    for paper_id, title in PAPERS.items():
        sections = []
        for table_id in dict.fromkeys(rows["table"]):
            table = tables[table_id]
            if table["paper"] != paper_id:
                continue
            trows = rows[rows["table"] == table_id]
            if table.get("plot") == "layers":  # the depth study: the metric against layers a side, a line per variant
                figure = pool.submit(figures.metric_against_layers, trows, table_id)
            else:
                figure = None if "measurement" in table else pool.submit(  # a measured table's runs: another table's curves
                    figures.learning_curves, trows, curves, {lbl: runs_by_row[(table_id, lbl)] for lbl in trows["label"]}, table_id, table["task"])
            views = with_references([{**_row_view(r), "run_links": run_links(runs_by_row[(table_id, r["label"])], results_dir, report_dir)}
                                     for _, r in trows.iterrows()], table)
            table_runs = runs[runs["run"].isin({r for lbl in trows["label"] for r in runs_by_row[(table_id, lbl)]})]
            sections.append({"id": table_id, "table": table, "rows": views, "figure": figure, "ran_as": ran_as(trows, table_runs, scale),
                             "cost": costs["tables"].get(table_id) if costs else None,
                             "features": sorted(table_runs["features"].dropna().unique()) if "features" in table_runs else [],
                             "bleu_tokenization": sorted(table_runs["bleu_tokenization"].dropna().unique()) if "bleu_tokenization" in table_runs else [],
                             "self_critical": sorted(int(n) for n in table_runs["scst_updates"].dropna().unique()) if "scst_updates" in table_runs else [],
                             "gallery": caption_gallery(samples, table_id)})
        if paper_id == BEYOND and not sections:  # opt-in: no heading for what the run did not select
            continue
        papers.append({"id": paper_id, "title": title, "sections": sections,
                       "figures": _figure_sections(agg_dir, figure_config, paper_id, pool, runs, scale)})

    claims_path = agg_dir / "claims.csv"
    summary = read_claims(claims_path) if claims_path.exists() else {}
    repeats = {f["id"]: f["same_as"] for p in papers for f in p["figures"] if f.get("same_as")}
    for paper in papers:
        paper["claims"] = [with_repeats(c, repeats) for c in summary.get(paper["id"], [])]

    status = runs["status"].value_counts().to_dict()
    unfinished = runs[runs["status"].isin(UNFINISHED)]
    return {
        "scale": scale,
        "note": note,
        "recipe": recipe,
        "papers": papers,
        "paper_against_reproduced": pool.submit(figures.paper_against_reproduced, rows.assign(paper_id=rows["table"].map(lambda t: tables[t]["paper"]))),
        "costs": costs,
        "downloads": downloads(agg_dir),
        "epoch_basis": rows["epoch_basis"].iloc[0] if len(rows) else "final",
        "counts": {"runs": len(runs), **{s: status.get(s, 0) for s in ("ok", "diverged", *UNFINISHED)}},
        # Runs without a result (a partial report): each with its status and why, so nothing is silently dropped.
        "unfinished": [{"run": r["run"], "status": r["status"], "error": r["error"] if isinstance(r["error"], str) else ""}
                       for _, r in unfinished.iterrows()],
        "provenance": {
            "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "report_commit": provenance.git_commit(),
            "run_commits": sorted(runs["git_commit"].dropna().unique()),
            "devices": sorted(runs["device"].dropna().unique()),
            "versions": provenance.versions(),
            "compute_hours": runs["wall_time_s"].fillna(0).sum() / 3600,
        },
    }


DISK_ONLY_ROWS = ("features", "peak")  # analysis/disk.py's rows beside the tables'


def gpu_costs(path: Path) -> dict | None:
    """The GPU-hours of each table at each costed scale (analysis/cost.py), for the report: its
    device, basis and session (commit, date), per scale what its hours count and leave out, how
    its runs hold their GPUs and what its deterministic kernels cost, and per table and scale the runs, seeds, hours and hours per seed."""
    if not path.exists():
        return None
    frame = pd.read_csv(path)
    first = frame.iloc[0]
    disk_rows = frame["table"].isin(DISK_ONLY_ROWS)
    tables: dict[str, dict] = {}
    for _, r in frame[~disk_rows].iterrows():
        tables.setdefault(r["table"], {})[r["scale"]] = {
            "runs": int(r["runs"]), "seeds": int(r["seeds"]), "hours": fmt(r["gpu_hours"], 1), "per_seed": fmt(r["gpu_hours_per_seed"], 1),
            "disk": fmt(r["disk_gb"], 1)}
    total = tables.pop("total")
    disk: dict[str, dict] = {}  # scale -> the features' GB and the peak's
    for _, r in frame[disk_rows].iterrows():
        disk.setdefault(r["scale"], {})[r["table"]] = fmt(r["disk_gb"], 1)
    sharing = {r["scale"]: r["sharing"] for _, r in frame[~disk_rows].iterrows()}
    counted = {r["scale"]: (r["counts"], r["leaves_out"]) for _, r in frame[~disk_rows].iterrows()}
    deterministic = {r["scale"]: r["deterministic"] for _, r in frame[~disk_rows].iterrows()}
    return {"device": first["device"], "basis": first["basis"], "commit": first["commit"], "date": first["date"], "source": first["source"],
            "scales": list(dict.fromkeys(frame["scale"])), "sharing": sharing, "counted": counted, "deterministic": deterministic,
            "tables": tables, "total": total, "disk": disk, "disk_source": first.get("disk_source", "")}


def _figure_sections(agg_dir: Path, entries: dict, paper_id: str, pool=None, runs: pd.DataFrame | None = None,
                     scale: str = "") -> list[dict]:
    """The paper's figures: its entry (caption, claim, settings), what each cell's runs show, and
    the drawing of the measurement's kind from figures.csv (a Future of its PNG, from `pool`)."""
    pool = pool or _DrawHere()
    if not entries:
        return []
    measured = (agg_dir / "figure_cells.csv").exists()
    cells = pd.read_csv(agg_dir / "figure_cells.csv", keep_default_na=False) if measured else pd.DataFrame(columns=["figure"])
    data = pd.read_csv(agg_dir / "figures.csv") if measured else pd.DataFrame(columns=["figure"])
    judged = (agg_dir / "figure_checks.csv").exists()  # the judge's (analysis/judgement.py)
    verdicts = read_figure_checks(agg_dir / "figure_checks.csv") if judged else {}
    differences = pd.read_csv(agg_dir / "figure_differences.csv") if judged else pd.DataFrame(columns=["figure"])
    difference_cells = pd.read_csv(agg_dir / "difference_cells.csv", keep_default_na=False) if judged else pd.DataFrame(columns=["figure"])
    out, measured_as = [], {}  # what a figure draws (drawn_data_key) -> the first figure that drew it
    for figure_id, entry in entries.items():
        if entry["paper"] != paper_id:
            continue
        if entry.get("not_reproduced"):  # never silently missing: its section says why
            out.append({"id": figure_id, "entry": entry, "not_reproduced": entry["not_reproduced"]})
            continue
        if figure_id not in set(cells["figure"]):  # not selected in this run
            continue
        fcells = cells[cells["figure"] == figure_id]
        fdata = data[data["figure"] == figure_id]
        shown = cell_views(fcells)
        ran = figure_ran_as(fdata, runs, scale) if runs is not None else ""
        drawn = fdata
        if entry.get("differences"):  # the figure shows its cells' differences, not the cells
            fdata = differences[differences["figure"] == figure_id]
            shown += cell_views(difference_cells[difference_cells["figure"] == figure_id])
            what = "absolute difference in " if all(d.get("abs") for d in entry["differences"]) else "difference in "
            drawn = fdata.assign(quantity=what + fdata["quantity"].astype(str))  # the axes say what is drawn; checks read fdata
        image = pool.submit(figures.DRAWINGS[fcells["kind"].iloc[0]], drawn, figure_id)
        # e.g. a CIFAR-100 figure whose runs, at mini scale, are the CIFAR-10 figure's (one stand-in dataset)
        same_as = measured_as.setdefault(drawn_data_key(drawn), figure_id) if len(drawn) else figure_id
        out.append({"id": figure_id, "entry": entry, "image": image, "ran_as": ran, "same_as": same_as if same_as != figure_id else None,
                    "verdicts": verdicts.get(figure_id, []), "cells": shown})
    return out


def cell_views(cells: pd.DataFrame) -> list[dict]:
    """A figure's cells (figure_cells.csv, or the judge's difference_cells.csv) as its table shows them."""
    return [{"label": c["label"], "n": int(c["n"]), "n_runs": int(c["n_runs"]), "summary": c["summary"]} for _, c in cells.iterrows()]


def _is_number(x) -> bool:  # rows.csv: a row without the column reads back as NaN
    return isinstance(x, (int, float)) and not math.isnan(x)


def _count(count) -> str:
    """A parameter count as papers print it: 65.00M, 467k (blank without one)."""
    if not _is_number(count):
        return ""
    return f"{count / 1e6:.2f}M" if count >= 1e6 else f"{count / 1e3:.0f}k"


def fmt_metric(value, metric: str) -> str:
    """A value of a run metric with its decimals (DIGITS); a measured quantity (a weight mass, a
    decay term of 2e-6), whose scale its name does not tell, with 4 significant digits."""
    if metric in METRICS or value is None or (isinstance(value, float) and math.isnan(value)):
        return fmt(value, DIGITS.get(metric, 2))
    return f"{value:.4g}"


def fmt_seeds(n) -> str:
    """Seeds per side the paper's difference needs (stats.seeds_needed): a count, "> 1000" past
    the search, "–" without one."""
    if not _is_number(n):
        return "–"
    return "> 1000" if math.isinf(n) else f"{int(n)}"


def unresolved_note(paper_runs, resolved) -> str:
    """A mark for a row whose paper claim its own runs could not resolve at this run's spreads;
    rows.csv holds the flag as True/False or empty (NaN), the runs as a count or empty."""
    if not isinstance(resolved, (bool, np.bool_)) or resolved or not _is_number(paper_runs):
        return ""
    runs = int(paper_runs)
    return f"the paper's {runs} run{'s' if runs != 1 else ''} could not resolve its own difference" + (" (one run has no spread)" if runs == 1 else "")


def caption_gallery(samples: pd.DataFrame, table_id: str) -> list[dict]:
    """A captioning table's test images, each with its thumbnail, first reference and the caption
    each model (its first seed) gave it, models in table order."""
    mine = samples[samples["table"] == table_id]
    return [{"image": image, "thumbnail": group["thumbnail"].iloc[0], "reference": group["reference"].iloc[0],
             "captions": list(zip(group["model"], group["caption"]))}
            for image, group in mine.groupby("image", sort=False)]


def with_references(views: list[dict], table: dict) -> list[dict]:
    """The table's rows with its reference rows (other work the paper prints, no run) placed after
    the last row of each metric they give, each value as the paper prints it ("–" for its "-")."""
    out = list(views)
    for ref in table.get("references", []):
        for metric, value in ref["paper"].items():
            shown = metric.replace("_", " ")
            at = max((i for i, v in enumerate(out) if v["metric"] == shown), default=len(out) - 1) + 1
            out.insert(at, {**{k: "" for k in views[0]}, "label": ref["label"], "metric": shown, "paper": fmt_metric(value, metric),
                            "reproduced": "not run (reference)", "n": 0, "n_runs": 0, "n_diverged": 0, "n_unfinished": 0,
                            "verdict": "reference", "reason": ref["source"], "note": ref["source"]})
    return out


def _text(value) -> str:
    """A text column of rows.csv as shown: an empty cell reads back as NaN and is shown empty."""
    return value if isinstance(value, str) else ""


def _row_view(r: pd.Series) -> dict:
    values = json.loads(r["values"])
    metric = r["metric"]
    if r["n"] == 0 and r["n_diverged"]:
        reproduced = "diverged"
    elif r["n"] == 0:
        reproduced = "no result"
    else:
        reproduced = f"{fmt_metric(r['mean'], metric)} ± {fmt_metric(r['std'], metric)}"
    return {
        "label": r["label"], "formula": _text(r["formula"]), "metric": metric.replace("_", " "), "paper": "new" if r.get("new") in (True,) else fmt_metric(r["paper"], metric),
        "reproduced": reproduced, "at": _text(r.get("at")),
        "ratio": fmt_metric(r.get("ratio"), "ratio"), "paper_ratio": fmt_metric(r.get("paper_ratio"), "ratio"),
        "loop_time_ratio": f"{r['loop_time_ratio']:.2f}x" if _is_number(r.get("loop_time_ratio")) else "",
        "note": _text(r["note"]),
        "n": int(r["n"]), "n_runs": int(r["n_runs"]), "n_diverged": int(r["n_diverged"]), "n_unfinished": int(r["n_unfinished"]),
        "values": ", ".join(str(v) for v in values), "delta": fmt_metric(r["delta"], metric),
        "run_as": " / ".join([r["dataset"], r["arch"], *([r["recipe"]] if r["recipe"] != "default" else []), r["variant_id"]]),
        "verdict": _text(r["verdict"]),
        "difference": fmt_metric(r.get("difference"), metric), "p_value": fmt_p(r.get("p_value")),
        "resolvable": fmt_metric(r.get("resolvable"), metric),
        "seeds_needed": fmt_seeds(r.get("seeds_needed")),
        "paper_unresolved": unresolved_note(r.get("paper_runs"), r.get("paper_resolved")),
        "reason": _text(r["reason"]),
        "baseline": _text(r["baseline"]),
        # translation only: the honest BLEU, the bootstrap against the baseline, the paper-size model
        "sacrebleu": fmt(r.get("sacrebleu")),
        "bootstrap_p": ", ".join(fmt_p(p) for p in json.loads(r["bootstrap_p"])) if isinstance(r.get("bootstrap_p"), str) else "",
        "parameters": _count(r.get("parameters_at_paper_size")),
        "parameters_vocabulary": f"{int(r['parameters_vocabulary']):,}" if _is_number(r.get("parameters_vocabulary")) else "",
        "paper_parameters": _count(r.get("paper_parameters")),
        "train_error": fmt(r.get("train_error")), "paper_train_error": fmt(r["paper_train_error"]) if _is_number(r.get("paper_train_error")) else "",
    }


def embedded_images(context: dict) -> dict[str, bytes]:
    """Every image the report embeds, by a file name that is its table or figure id (its anchor
    in the report), for Snakemake's report and for readers who want the PNGs."""
    uris = {"summary.png": context["paper_against_reproduced"]}
    for paper in context["papers"]:
        uris.update({f"{s['id']}.png": s["figure"] for s in paper["sections"]})
        uris.update({f"{f['id']}.png": f.get("image") for f in paper["figures"]})
    return {name: base64.b64decode(uri.split(",", 1)[1]) for name, uri in uris.items() if uri}


def render(agg_dir: str | Path, plan: dict, template: str | Path, out: str | Path, recipe: dict, note: str = "",
           results_dir: str | Path | None = None, figures_dir: str | Path | None = None, workers: int = 1) -> None:
    """The report to `out`; with `figures_dir`, each of its images also as a PNG file there; with
    `results_dir`, each row links to its runs' folders."""
    template = Path(template)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(template.parent), autoescape=True, undefined=jinja2.StrictUndefined)
    context = build_context(Path(agg_dir), plan, recipe, note, Path(results_dir) if results_dir else None, Path(out).parent, workers)
    files.write_text(out, env.get_template(template.name).render(**context))
    if figures_dir is not None:
        Path(figures_dir).mkdir(parents=True, exist_ok=True)
        for name, png in embedded_images(context).items():
            (Path(figures_dir) / name).write_bytes(png)
