"""The report's cells: runs on disk -> `resrepro aggregate` -> `resrepro report` -> the HTML, read
back cell by cell (a diverged row, a row with failed and missing seeds, a verdict row, a baseline)."""

import base64
import json
import re
import shutil
from types import SimpleNamespace
from html import unescape
from pathlib import Path

import matplotlib.colors
import numpy as np
import pandas as pd
import pytest
from fake_runs import CLAIMS, FIGURES, TABLES, plan_for, tiny_config, write_metrics, write_translation_run
from report_html import row_by_label, table_rows
from scipy import stats as scipy_stats

from resrepro import cli, files
from resrepro.experiments import load_figures, load_tables, plan_document
from resrepro.report.render import data_uri, fmt, fmt_p
from resrepro.report import figures
from resrepro.report import render as render_module


TRANSLATION_BLEU = {"xskip_ln": [30.0, 31.0, 32.5], "rskip_ln-lam2": [34.0, 34.5, 35.5]}


@pytest.fixture
def report(tmp_path):
    """sas-t7, rskip-t3 and rskip-t5 at 3 seeds: a partial run with diverged, failed and missing
    seeds. Built anew for each test (about a second), so that mutation testing, which runs the
    tests that call a function, finds every test that reads the report. No training logs: drawing
    the learning curves would triple the cost, and one test checks them (`build_report`)."""
    return build_report(tmp_path, train_logs=False)


SAS_RSKIP = (f"{TABLES}/sas.yaml", f"{TABLES}/rskip.yaml")


def write_plan(path: Path, rows: list[dict], tables=SAS_RSKIP, figures=(), claims=None, measures=()) -> Path:
    """A resolved plan (experiments.plan_document) of these table rows over these tables' and figures' files."""
    files.write_json(path, plan_document("tiny", load_tables(list(tables)), load_figures(list(figures)) if figures else {}, claims, rows,
                                         list(measures)))
    return path


def read_plan(path: Path) -> dict:
    return json.loads(path.read_text())


def judge_figures(agg: Path, figure_files: list[str]) -> None:
    """The judge's figure tables (checks, difference curves and cells) beside hand-made figures.csv and figure_cells.csv."""
    from resrepro.analysis.judgement import judge_figures as judge

    cells = pd.read_csv(agg / "figure_cells.csv", keep_default_na=False)
    for name, frame in judge(load_figures(figure_files), pd.read_csv(agg / "figures.csv"), cells).items():
        frame.to_csv(agg / f"{name}.csv", index=False)


def analyse(plan_path: Path, results: Path, agg: Path) -> None:
    """The analysis as the pipeline runs it: the parameter counts, the aggregate, the judge."""
    cli.main(["parameters", "--plan", str(plan_path), "--out", str(agg / "parameters.csv")])
    cli.main(["aggregate", "--plan", str(plan_path), "--parameters", str(agg / "parameters.csv"), "--results-dir", str(results),
              "--epoch", "final", "--out-dir", str(agg)])
    cli.main(["judge", "--plan", str(plan_path), "--aggregate-dir", str(agg)])


def build_report(root, train_logs: bool) -> SimpleNamespace:
    results = root / "results"
    plan = plan_for(["sas-t7", "rskip-t3", "rskip-t5"])
    errors = {
        "add": [6.0, 6.3, 6.6],
        "sas-normbn": [None, None, None],  # every seed diverged
        "sas": [5.0, "failed", "missing"],
        "xskip-lam0.5": [20.0, 21.0, 22.5],
        "xskip_ln-lam0.5": [30.0, None, 31.0],
        "ln_scale_f-k2": [6.1, 6.4, 6.5],
        "ln_scale_f-k3": [90.0, 90.0, 90.0],
    }
    refs = [f"the cat number {i} sat on the mat today" for i in range(20)]
    hyps = {"xskip_ln": [r.replace("sat on", "ate") if i % 2 else r for i, r in enumerate(refs)], "rskip_ln-lam2": refs}
    for path, run in plan.runs.items():
        if run.task == "translation":
            write_translation_run(results, path, TRANSLATION_BLEU[run.variant_id][run.seed], 25.0 + run.seed, hyps[run.variant_id], refs)
            continue
        value = errors[run.variant_id][run.seed]
        if value == "failed":
            files.write_json(results / path / "failed.json", {"error": "RuntimeError: CUDA out of memory", "command": "train"})
        elif value != "missing":
            write_metrics(results, path, value, train_log=train_logs and value is not None)
    agg = root / "aggregate"
    plan_path = write_plan(root / "plan.json", plan.rows)
    analyse(plan_path, results, agg)
    html = render_report(agg, root / "index.html", plan_path)
    return SimpleNamespace(html=html, rows=pd.read_csv(agg / "rows.csv").set_index(["table", "label"]), aggregate=agg, plan=plan_path)


def render_report(aggregate_dir, out, plan_path) -> str:
    cli.main(["report", "--plan", str(plan_path), "--aggregate-dir", str(aggregate_dir), "--template", "report/templates/index.html.j2",
              "--out", str(out)])
    return out.read_text()


def test_a_diverged_row_shows_diverged_not_a_number(report):
    bn = row_by_label(report.html, "sas-t7", "SAS with BN")
    assert bn["reproduced"] == "diverged"
    assert bn["n"] == "0/3 (3 diverged)"
    assert bn["per seed"] == "diverged, diverged, diverged"
    assert bn["Δ"] == "–" and bn["verdict"] == "no result" and bn["paper"] == "93.23"
    half = row_by_label(report.html, "rskip-t3", "LN(0.5x + F)")  # one seed of three diverged
    assert half["n"] == "2/3 (1 diverged)" and half["per seed"] == "30.0, diverged, 31.0"
    assert half["reproduced"] == f"{30.5:.2f} ± {scipy_stats.tstd([30.0, 31.0]):.2f}"


def test_a_row_with_failed_and_missing_seeds(report):
    ln = row_by_label(report.html, "sas-t7", "SAS with LN")
    assert ln["reproduced"] == "95.00 ± –"  # one finished seed: no spread
    assert ln["n"] == "1/3 (2 without result)"
    assert ln["per seed"] == "95.0, failed, missing"
    assert ln["Δ"] == f"{95.0 - 94.05:.2f}"
    assert ln["verdict"] == "inconclusive" and ln["p"] == "–" and ln["resolvable"] == "–"


def test_a_rows_note_is_shown_beside_it(report):
    """sas-t7's SAS with LN is the cell of Table 4's proposal and Table 6's Full Model: its note
    says so; rows without a note show an empty cell, and a table without notes has no column."""
    assert row_by_label(report.html, "sas-t7", "SAS with LN")["note"].startswith("The same configuration as Table 4's CIFAR-10 proposal")
    assert row_by_label(report.html, "sas-t7", "SAS with BN")["note"] == ""
    assert "note" not in row_by_label(report.html, "rskip-t3", "x + F")


def test_the_baseline_row(report):
    base = row_by_label(report.html, "sas-t7", "x + F (Baseline)")
    assert base["reproduced"] == f"{100 - 6.3:.2f} ± {scipy_stats.tstd([94.0, 93.7, 93.4]):.2f}"
    assert (base["paper"], base["Δ"], base["vs baseline"], base["verdict"]) == ("93.66", f"{100 - 6.3 - 93.66:.2f}", "(baseline)", "baseline")
    assert base["diff"] == base["p"] == base["resolvable"] == ""
    assert base["run as"] == "digits / preact_resnet8 / add"  # the default recipe goes unnamed


def test_header_and_cells_that_come_from_the_context(report):
    """The scale names the report and the results folder; the training time is the runs'
    wall time in hours; a row with no finished and no diverged seed says "no result"; text
    from the tables is escaped, never read as HTML."""
    assert "<title>resrepro report: tiny scale</title>" in report.html and "results/tiny/" in report.html
    runs = pd.read_csv(report.aggregate / "runs.csv")
    hours = runs["wall_time_s"].fillna(0).sum() / 3600
    assert runs["wall_time_s"].isna().any() and hours > 0  # failed and missing runs have no time
    assert f"Total training time: {hours:.2f} device-hours." in re.sub(r"\s+", " ", report.html)
    rows = pd.read_csv(report.aggregate / "rows.csv")
    row = rows["label"] == "SAS with LN"
    rows.loc[row, ["n", "n_diverged", "n_unfinished"]] = [0, 0, 3]
    rows.loc[row, "formula"] = "a < b & c"
    files.write_text(report.aggregate / "rows.csv", rows.to_csv(index=False))
    html = render_report(report.aggregate, report.aggregate / "edited.html", report.plan)
    cells = row_by_label(html, "sas-t7", "SAS with LN")
    assert cells["reproduced"] == "no result"
    assert "<code>a &lt; b &amp; c</code>" in html


def test_run_as_names_a_refined_recipe(report):
    """A run trained under a paper's own protocol (recipes.py) says so in the "run as" cell."""
    rows = pd.read_csv(report.aggregate / "rows.csv")
    rows.loc[rows["label"] == "SAS with LN", "recipe"] = "sas-long+sas-big"
    files.write_text(report.aggregate / "rows.csv", rows.to_csv(index=False))
    html = render_report(report.aggregate, report.aggregate / "refined.html", report.plan)
    assert row_by_label(html, "sas-t7", "SAS with LN")["run as"] == "digits / preact_resnet8 / sas-long+sas-big / sas"
    assert row_by_label(html, "sas-t7", "x + F (Baseline)")["run as"] == "digits / preact_resnet8 / add"


def test_verdict_cells_carry_the_rows_numbers(report):
    row = row_by_label(report.html, "rskip-t3", "0.5x + F")
    values, base = [20.0, 21.0, 22.5], [6.0, 6.3, 6.6]
    welch = scipy_stats.ttest_ind(values, base, equal_var=False)
    assert row["verdict"] == "supported" and row["vs baseline"] == "x + F"
    assert row["diff"] == f"{sum(values) / 3 - 6.3:.2f}"
    assert row["p"] == fmt_p(welch.pvalue) and welch.pvalue < 0.05
    tie = row_by_label(report.html, "rskip-t3", "LN(x + 3F)")  # 90 on every seed: worse, as the paper says
    assert tie["reproduced"] == "90.00 ± 0.00" and tie["verdict"] == "supported"
    near = row_by_label(report.html, "rskip-t3", "LN(x + 2F)")
    assert near["verdict"] == "inconclusive" and float(near["resolvable"]) > abs(float(near["diff"]))


def test_the_partial_report_lists_each_run_without_a_result(report):
    assert 'id="partial"' in report.html
    listed = {r["run"]: r for r in table_rows(report.html, "unfinished")}
    assert len(listed) == 2 and all("/sas/" in p for p in listed)  # sas seeds 1 and 2
    failed = next(r for p, r in listed.items() if p.endswith("seed1"))
    missing = next(r for p, r in listed.items() if p.endswith("seed2"))
    assert (failed["status"], failed["why"]) == ("failed", "RuntimeError: CUDA out of memory")
    assert (missing["status"], missing["why"]) == ("missing", "never ran")


def test_translation_cells(report):
    """rskip-t5: tokenized BLEU as the reproduced number, sacreBLEU, the per-seed bootstrap p and
    the paper-size parameter count, each in its own cell."""
    rows = report.rows
    prop = row_by_label(report.html, "rskip-t5", "2rSkip+LN, 6 blocks")
    base = row_by_label(report.html, "rskip-t5", "1xSkip+LN, 6 blocks")
    values = TRANSLATION_BLEU["rskip_ln-lam2"]
    assert prop["reproduced"] == f"{sum(values) / 3:.2f} ± {scipy_stats.tstd(values):.2f}"
    assert prop["per seed"] == "34.0, 34.5, 35.5" and prop["paper"] == "31.45"
    assert prop["sacreBLEU"] == "26.00" and base["sacreBLEU"] == "26.00"  # 25, 26, 27 on every row
    p = json.loads(rows.loc[("rskip-t5", "2rSkip+LN, 6 blocks"), "bootstrap_p"])
    assert len(p) == 3 and prop["bootstrap p (per seed)"] == ", ".join(fmt_p(x) for x in p)
    assert base["bootstrap p (per seed)"] == ""  # a baseline is not tested against itself
    assert base["parameters at paper size (vocabulary)"] == "60.88M (32,768)"  # 60,878,848
    assert prop["parameters at paper size (vocabulary)"] == "60.91M (32,768)"  # + 30 LNs x 1024
    assert "parameters, paper" not in prop  # rskip-t5: the paper prints no counts
    assert prop["verdict"] == "supported" and prop["vs baseline"] == "1xSkip+LN, 6 blocks"
    assert row_by_label(report.html, "sas-t7", "SAS with LN").get("sacreBLEU") is None  # only translation tables


def test_paper_parameter_counts_stand_beside_ours(tmp_path):
    """rskip-t7: the paper's count (EN-DE rows only) beside ours at the pipeline's vocabulary."""
    plan = plan_for(["rskip-t7"], seeds=1)
    plan_path = write_plan(tmp_path / "plan.json", plan.rows, (f"{TABLES}/rskip.yaml",))
    analyse(plan_path, tmp_path / "results", tmp_path / "agg")
    html = render_report(tmp_path / "agg", tmp_path / "index.html", plan_path)
    de_big = row_by_label(html, "rskip-t7", "EN-DE Big + proposal")
    assert de_big["parameters, paper"] == "213.06M" and de_big["parameters at paper size (vocabulary)"] == "209.90M (32,768)"
    assert row_by_label(html, "rskip-t7", "EN-DE Base")["parameters, paper"] == "65.00M"
    en_vi = row_by_label(html, "rskip-t7", "EN-VI Base")
    assert en_vi["parameters, paper"] == "" and en_vi["parameters at paper size (vocabulary)"] == "60.88M (32,768)"


def test_train_errors_and_parameter_counts_of_a_classification_table(tmp_path):
    """iter-t1: the paper's train error beside the last epoch's, the paper's parameter count
    beside ours at paper size; a classification table without them has neither column."""
    from fake_runs import write_metrics

    plan = plan_for(["iter-t1", "sas-t7"], seeds=1)
    for path in plan.runs:
        write_metrics(tmp_path / "results", path, 10.0, train_error=1.25)
    plan_path = write_plan(tmp_path / "plan.json", plan.rows, (f"{TABLES}/iter.yaml", f"{TABLES}/sas.yaml"))
    analyse(plan_path, tmp_path / "results", tmp_path / "agg")
    html = render_report(tmp_path / "agg", tmp_path / "index.html", plan_path)
    ubn = row_by_label(html, "iter-t1", "ResNet-110-UBN, CIFAR-100")
    assert (ubn["train error, paper"], ubn["train error"]) == ("7.75", "1.25")
    assert (ubn["parameters, paper"], ubn["parameters at paper size"]) == ("576k", "575k")  # 575,156
    assert row_by_label(html, "iter-t1", "ResNet-110, CIFAR-10")["parameters, paper"] == "1.73M"  # 1,734k
    sas = row_by_label(html, "sas-t7", "SAS with LN")
    assert "train error" not in sas and "parameters, paper" not in sas


@pytest.mark.parametrize("count, text", [(None, ""), (float("nan"), ""), (467_000, "467k"), (999_499, "999k"), (1_000_000, "1.00M"),
                                         (65_030_000, "65.03M")])
def test_parameter_counts_read_as_papers_print_them(count, text):
    from resrepro.report.render import _count

    assert _count(count) == text


@pytest.mark.parametrize("value, text", [(None, "–"), (float("nan"), "–"), (1.005, "1.00"), (-2.5, "-2.50"), (3, "3.00")])
def test_fmt(value, text):
    assert fmt(value) == text


@pytest.mark.parametrize("value, text", [(None, "–"), (0.0004, "<0.001"), (0.001, "0.001"), (0.0456, "0.046"), (1.0, "1.000")])
def test_fmt_p(value, text):
    assert fmt_p(value) == text


def test_the_header_counts_runs_by_status_and_names_the_epoch(report, tmp_path):
    """9 cells at 3 seeds (sas-t7 and rskip-t3: 7, rskip-t5: 2 at tiny scale): 27 runs, of which 4
    diverged (sas-normbn's 3, one of xskip_ln-lam0.5's), 1 failed and 1 missing."""
    header = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", report.html))
    assert "27 runs: 21 finished, 4 diverged, 1 failed, 0 incomplete, 1 missing." in header
    assert "Reproduced numbers are final-epoch test metrics" in header
    rows = pd.read_csv(report.aggregate / "rows.csv")
    rows["epoch_basis"] = "best"  # as `--epoch best` writes it
    best = shutil.copytree(report.aggregate, tmp_path / "best")
    files.write_text(best / "rows.csv", rows.to_csv(index=False))
    assert "Reproduced numbers are <b>best-epoch</b> test metrics" in render_report(best, tmp_path / "best.html", report.plan)


def test_each_table_with_training_logs_has_its_learning_curves(report, tmp_path):
    """The figure is embedded as a PNG data URI under its table; a table none of whose runs has a
    training log (rskip-t5 here, and every table of the `report` fixture) has no figure rather
    than empty axes."""
    assert "alt=\"learning curves" not in report.html
    report = build_report(tmp_path / "with-logs", train_logs=True)
    assert 'alt="learning curves of rskip-t5"' not in report.html
    for table_id in ("sas-t7", "rskip-t3"):
        found = re.search(rf'<img src="data:image/png;base64,([^"]+)" alt="learning curves of {table_id}">', report.html)
        assert found, table_id
        assert base64.b64decode(found.group(1)).startswith(b"\x89PNG\r\n\x1a\n")


def test_figures_drawn_in_worker_processes_are_the_figures_drawn_here(tmp_path):
    """--threads 2 draws the figures in forked workers: the same images, each in its own place."""
    from concurrent.futures import ProcessPoolExecutor

    from resrepro.report import render as render_module

    report = build_report(tmp_path / "with-logs", train_logs=True)
    pool = render_module.drawing_pool(2)
    assert isinstance(pool, ProcessPoolExecutor) and not isinstance(render_module.drawing_pool(1), ProcessPoolExecutor)
    pool.shutdown()

    def images(workers):
        ctx = render_module.build_context(report.aggregate, read_plan(report.plan), {}, workers=workers)
        return ctx["paper_against_reproduced"], {s["id"]: s["figure"] for p in ctx["papers"] for s in p["sections"]}

    here, there = images(1), images(2)
    assert here == there
    assert here[0].startswith("data:image/png") and {k for k, v in here[1].items() if v} == {"sas-t7", "rskip-t3"}


def test_data_uri():
    assert data_uri(b"\x89PNG") == "data:image/png;base64,iVBORw=="
    assert data_uri(None) is None


def test_a_figure_section_shows_the_claim_what_each_cell_shows_and_its_drawing(tmp_path):
    """sas-f3 over 2 seeds of which one is measured: the cell says 1/2 and the measurement's
    summary of that run; the paper's claim and the drawing are beside it. Unmeasured: it says so."""
    import yaml

    from resrepro import experiments
    from resrepro.measure.gates import summarize_gates

    plan = experiments.make_plan(tiny_config() | {"tables": ["sas-t7"], "figures": ["sas-f3"], "seeds": 2})
    for path in plan.runs:
        write_metrics(tmp_path / "results", path, 5.0)

    def report() -> str:
        plan_path = write_plan(tmp_path / "plan.json", plan.rows, (f"{TABLES}/sas.yaml",), (f"{FIGURES}/sas.yaml",),
                               measures=plan.measures)
        analyse(plan_path, tmp_path / "results", tmp_path / "agg")
        return render_report(tmp_path / "agg", tmp_path / "i.html", plan_path)

    unmeasured = report()
    (cell,) = table_rows(unmeasured, "sas-f3")
    assert cell == {"cell": "SAS (LN)", "runs measured": "0/2", "this run shows (mean over its seeds)": "no finished run measured"}
    assert {c["verdict"] for c in table_rows(unmeasured, "sas-f3", which=0)} == {"no result"}
    gates = pd.DataFrame([(b, q, v) for b in (1, 2, 3) for q, v in (("alpha", 0.95), ("beta", 0.1 * b), ("gamma", 0.05 / b))],
                         columns=["block", "quantity", "value"])
    files.write_text(tmp_path / "results" / plan.measures[0]["runs"][0] / "measure" / "sas_gates.csv", gates.to_csv(index=False))
    html = report()
    (cell,) = table_rows(html, "sas-f3")
    assert cell["runs measured"] == "1/2" and cell["this run shows (mean over its seeds)"] == summarize_gates(gates)
    section = html[html.index('<section id="sas-f3">'):]
    section = section[: section.index("</section>")]
    assert "beta grows with depth" in section and section.count("data:image/png;base64,") == 1
    # its checks: alpha 0.95 above 0.9 everywhere, beta rises, gamma falls; one seed of two measured
    checks = table_rows(html, "sas-f3", which=0)
    assert [(c["verdict"], c["seeds where it holds"]) for c in checks] == [("supported", "1/1")] * 3
    source = load_figures(FIGURES)["sas-f3"]["checks"][1]["source"]  # the sentence the check tests, beside it
    assert checks[1]["part of the claim checked"] == "beta grows with depth (last block above the first)" + source
    checks[1]["part of the claim checked"] = "beta grows with depth (last block above the first)"
    assert checks[1] == {"part of the claim checked": "beta grows with depth (last block above the first)", "verdict": "supported",
                         "seeds where it holds": "1/1", "evidence (mean over seeds)": "least rise: 0.1 to 0.3 along block (SAS (LN), beta)",
                         "smallest difference these seeds resolve": "–"}
    assert '<a href="#sas-f3">' in html


def test_context_values_exactly(report):
    """What the header states, to the last digit: the training hours (missing and failed runs
    count 0 s), the generation time in UTC, the note only when given, the epoch basis."""
    from resrepro.report.render import build_context, render

    plan = read_plan(report.plan)
    ctx = build_context(report.aggregate, plan, {})
    runs = pd.read_csv(report.aggregate / "runs.csv")
    assert ctx["provenance"]["compute_hours"] == runs["wall_time_s"].sum() / 3600 and runs["wall_time_s"].isna().sum() == 2
    assert ctx["provenance"]["generated_at"].endswith("+00:00") and ctx["note"] == "" and ctx["epoch_basis"] == "final"
    out = report.aggregate / "noted.html"
    render(report.aggregate, plan, "report/templates/index.html.j2", out, {})
    assert "About this scale" not in out.read_text()
    render(report.aggregate, plan, "report/templates/index.html.j2", out, {}, "digits, not CIFAR")
    assert "<b>About this scale:</b> digits, not CIFAR" in out.read_text()


def test_empty_text_cells_stay_empty():
    """rows.csv reads an empty formula, verdict, reason, baseline or vocabulary back as NaN: shown empty."""
    from resrepro.report.render import _row_view

    row = pd.Series({"label": "r", "formula": float("nan"), "metric": "test_error", "paper": 1.0, "mean": 1.0, "std": float("nan"), "n": 1, "n_runs": 1,
                     "n_diverged": 0, "n_unfinished": 0, "values": "[1.0]", "delta": 0.0, "dataset": "d", "arch": "a",
                     "recipe": "default", "variant_id": "add", "note": float("nan"), "verdict": float("nan"),
                     "reason": float("nan"), "baseline": float("nan"), "parameters_vocabulary": float("nan"),
                     "parameters_at_paper_size": float("nan"), "paper_parameters": float("nan")})
    view = _row_view(row)
    assert [view[k] for k in ("formula", "verdict", "reason", "baseline", "note", "parameters_vocabulary", "parameters", "paper_parameters")] == [""] * 8
    view = _row_view(row.copy().fillna({"verdict": "supported", "reason": "p < 0.05", "baseline": "b", "parameters_vocabulary": 32768}))
    assert (view["verdict"], view["reason"], view["baseline"], view["parameters_vocabulary"]) == ("supported", "p < 0.05", "b", "32,768")


def test_gpu_hours_per_table_are_shown_with_their_device_and_basis(report):
    """gpu_hours.csv (resrepro gpu-hours): a table of every costed table and scale, and a line in
    each table's section; without the file, neither."""
    from report_html import table_rows

    assert 'id="gpu-hours"' not in report.html
    nan = float("nan")
    costs = pd.DataFrame([
        {"scale": "paper", "table": "sas-t7", "runs": 15, "seeds": 5, "gpu_hours": 43.44, "gpu_hours_per_seed": 8.688, "disk_gb": 11.55},
        {"scale": "paper", "table": "total", "runs": 315, "seeds": 5, "gpu_hours": 3397.7, "gpu_hours_per_seed": nan, "disk_gb": 1366.4},
        {"scale": "paper", "table": "features", "runs": nan, "seeds": nan, "gpu_hours": nan, "gpu_hours_per_seed": nan, "disk_gb": 24.77},
        {"scale": "paper", "table": "peak", "runs": nan, "seeds": nan, "gpu_hours": nan, "gpu_hours_per_seed": nan, "disk_gb": 1389.2},
        {"scale": "gpu-day", "table": "sas-t7", "runs": 6, "seeds": 2, "gpu_hours": 1.63, "gpu_hours_per_seed": 0.815, "disk_gb": 4.62},
        {"scale": "gpu-day", "table": "total", "runs": 126, "seeds": 2, "gpu_hours": 18.4, "gpu_hours_per_seed": nan, "disk_gb": 561.3},
        {"scale": "gpu-day", "table": "features", "runs": nan, "seeds": nan, "gpu_hours": nan, "gpu_hours_per_seed": nan, "disk_gb": 24.77},
        {"scale": "gpu-day", "table": "peak", "runs": nan, "seeds": nan, "gpu_hours": nan, "gpu_hours_per_seed": nan, "disk_gb": 584.0},
    ]).assign(device="NVIDIA H100", basis="estimate", commit="abc1234", date="2026-11-24", source="from anchors",
              disk_source="measured on the rehearsal")
    costs["sharing"] = costs["scale"].map({"paper": "each run alone on its GPUs", "gpu-day": "4 runs a GPU as processes"})
    costs["counts"] = costs["scale"].map({"paper": "training steps; checkpoint writes at 2 GB/s", "gpu-day": "training steps"})
    costs["leaves_out"] = "evaluation, data preparation"
    costs["deterministic"] = costs["scale"].map({"paper": "on for classification; off, a step takes 0.66x its time",
                                                 "gpu-day": "off: torch's fastest kernels"})
    costs.to_csv(report.aggregate / "gpu_hours.csv", index=False)
    html = render_report(report.aggregate, report.aggregate / "costed.html", report.plan)
    assert "GPU-hours and disk per table at paper and gpu-day scale, on NVIDIA H100" in html and "an estimate" in html
    said = " ".join(html.split())
    assert "an estimate at commit abc1234 on 2026-11-24)" in said
    assert ("At paper scale the hours count training steps; checkpoint writes at 2 GB/s, and leave out evaluation, data preparation. "
            "At gpu-day scale the hours count training steps, and leave out evaluation, data preparation.") in said
    assert "Runs per GPU: paper, each run alone on its GPUs; gpu-day, 4 runs a GPU as processes." in said
    assert ("Deterministic kernels: at paper scale on for classification; off, a step takes 0.66x its time; "
            "at gpu-day scale off: torch's fastest kernels.") in unescape(said)
    sas_t7, features, total, peak = (list(row.values()) for row in table_rows(html, "gpu-hours"))
    assert sas_t7 == ["sas-t7", "15", "43.4", "8.7", "11.6", "6", "1.6", "0.8", "4.6"]
    assert total[:3] == ["total", "315", "3397.7"] and total[4] == "1366.4" and total[5:7] == ["126", "18.4"] and total[8] == "561.3"
    assert features[0] == "MSCOCO features" and (features[4], features[8]) == ("24.8", "24.8")
    assert peak[0] == "disk at the peak" and (peak[4], peak[8]) == ("1389.2", "584.0")
    assert "measured on the rehearsal" in html
    assert "Cost: 43.4 GPU-hours at paper scale (8.7 per seed), 1.6 GPU-hours at gpu-day scale (0.8 per seed)" in " ".join(html.split())


def test_a_figure_from_figures_csv_is_drawn_whatever_columns_other_measurements_add(monkeypatch):
    """figures.csv holds every measurement's columns: a per-block figure's rows carry empty
    `group` and `scale` cells (borderline's, unroll's), which must not blank its lines."""
    drawn = {}
    monkeypatch.setattr(figures, "to_png", lambda fig: drawn.setdefault("fig", fig) and b"png")
    rows = pd.DataFrame([{"figure": "f", "label": "net", "run": "r", "split": split, "block": b, "quantity": "q", "value": 0.1 * b,
                          "group": float("nan"), "scale": float("nan"), "epoch": float("nan")}
                         for split in ("train", "test") for b in (1, 2, 3)])
    figures.per_block(rows, "f")
    lines = [line for ax in drawn["fig"].axes for line in ax.get_lines()]
    assert len(lines) == 2 and [list(line.get_xdata()) for line in lines] == [[1, 2, 3]] * 2
    assert {line.get_label() for line in lines} == {"net, train (1 run)", "net, test (1 run)"}
    unrolled = rows.assign(scale=[1.0] * 3 + [0.05] * 3, split="test")
    drawn.clear()
    figures.per_block(unrolled, "f")
    assert {line.get_label() for line in drawn["fig"].axes[0].get_lines()} == {"net, scale 1, test (1 run)", "net, scale 0.05, test (1 run)"}


def test_a_loss_row_is_shown_to_4_decimals_and_an_error_row_to_2():
    """Paper 002's losses (0.07227) would read 0.07 at the errors' 2 decimals."""
    from resrepro.report.render import _row_view

    row = pd.Series({"label": "r", "formula": "", "metric": "train_loss", "paper": 0.07227, "mean": 0.051234, "std": 0.00123, "n": 3,
                     "n_runs": 3, "n_diverged": 0, "n_unfinished": 0, "values": "[0.0501, 0.0512]", "delta": -0.021036, "dataset": "d",
                     "arch": "a", "recipe": "default", "variant_id": "add", "note": "", "verdict": "supported", "reason": "",
                     "baseline": "b", "difference": -0.15, "resolvable": 0.00456})
    view = _row_view(row)
    assert (view["metric"], view["paper"], view["reproduced"], view["delta"]) == ("train loss", "0.0723", "0.0512 ± 0.0012", "-0.0210")
    assert (view["difference"], view["resolvable"]) == ("-0.1500", "0.0046")
    assert _row_view(row.copy().replace({"train_loss": "test_error"}))["paper"] == "0.07"


def test_a_figure_of_differences_draws_judges_and_sums_up_the_differences(tmp_path, monkeypatch):
    """noise-f9b from hand-made curves (2 seeds): the plain nets lose 0.3 to 12 more layers, the
    residual nets 0.1; the plain-residual gap grows from 0.1 to 0.4 at depth 32. The figure shows
    the four differences, not its cells, judges its checks on them and sums each up."""
    from resrepro.report import render as render_module

    drawn = {}
    monkeypatch.setattr(figures, "to_png", lambda fig: drawn.setdefault("fig", fig) and b"png")
    base = {"PlnNet-32": [2.0, 1.5], "PlnNet-44": [2.3, 1.8], "ResNet-32": [1.9, 1.1], "ResNet-44": [2.0, 1.2]}
    data = pd.DataFrame([{"figure": "noise-f9b", "cell": i, "label": label, "run": f"{label}/seed{s}", "seed": s, "epoch": e + 1,
                          "quantity": "training loss", "value": v + 0.01 * s, "block": float("nan")}
                         for i, (label, curve) in enumerate(base.items()) for s in (0, 1) for e, v in enumerate(curve)])
    data.to_csv(tmp_path / "figures.csv", index=False)
    pd.DataFrame([{"figure": "noise-f9b", "cell": i, "label": label, "measurement": "learning_curve", "kind": "per_epoch", "n": 2,
                   "n_runs": 3, "summary": "s"} for i, label in enumerate(base)]).to_csv(tmp_path / "figure_cells.csv", index=False)
    judge_figures(tmp_path, [f"{FIGURES}/noise.yaml"])
    sections = render_module._figure_sections(tmp_path, load_figures([f"{FIGURES}/noise.yaml"]), "noise")
    # the figures this run did not measure are left out, those it cannot reproduce say why
    assert [s["id"] for s in sections] == ["noise-f9b", "noise-f11"]  # noise-f11d, -f11e and -f13 are computed: not in this figures.csv
    section = sections[0]
    assert "equations that our copy of the paper lost" in sections[1]["not_reproduced"]
    labels = [c["label"] for c in section["cells"]]
    assert labels == [*base, "plain: 44 minus 32 layers", "residual: 44 minus 32 layers", "depth 32: plain minus residual",
                      "depth 44: plain minus residual"]
    gap = section["cells"][6]
    assert (gap["n"], gap["n_runs"]) == (2, 3)
    # a cell with nothing measured leaves its differences empty: no pairs, nothing to sum up
    data[data["label"] != "ResNet-44"].to_csv(tmp_path / "figures.csv", index=False)
    judge_figures(tmp_path, [f"{FIGURES}/noise.yaml"])
    unpaired = render_module._figure_sections(tmp_path, load_figures([f"{FIGURES}/noise.yaml"]), "noise")[0]["cells"][7]
    assert (unpaired["label"], unpaired["n"], unpaired["summary"]) == ("depth 44: plain minus residual", 0, "")
    data.to_csv(tmp_path / "figures.csv", index=False)
    assert gap["summary"].startswith("training loss 0.1 at epoch 1, 0.4 at epoch 2")
    assert [v.verdict for v in section["verdicts"]] == ["supported"] * 3
    assert section["verdicts"][0].evidence == "plain: 44 minus 32 layers 0.3 > residual: 44 minus 32 layers 0.1"
    lines = drawn["fig"].axes[0].get_lines()
    assert {line.get_label().split(" (")[0] for line in lines} == set(labels[4:])
    # the axes name what is drawn (the checks above select the quantity by its own name)
    assert drawn["fig"].axes[0].get_ylabel().replace("\n", " ") == "mean difference in training loss"


def test_a_learning_curve_is_drawn_on_a_log_scale_only_when_no_value_is_negative(monkeypatch):
    """Log where every value is positive; with exact zeros (noise-f6's equivalent nets), a symmetric
    log scale, linear below the smallest positive value, so that the zeros show at the bottom."""
    drawn = []
    monkeypatch.setattr(figures, "to_png", lambda fig: drawn.append(fig) or b"png")
    rows = pd.DataFrame([{"figure": "f", "label": "net", "run": "r", "epoch": e, "quantity": "q", "value": v}
                         for e, v in enumerate([2.0, 1e-3, 0.0])])
    figures.per_epoch(rows.assign(value=[2.0, 1.0, 0.5]), "f")
    figures.per_epoch(rows, "f")
    figures.per_epoch(rows.assign(value=[1.0, 0.0, -0.5]), "f")
    figures.per_epoch(rows.assign(value=0.0), "f")
    assert [fig.axes[0].get_yscale() for fig in drawn] == ["log", "symlog", "linear", "linear"]
    with_zeros = drawn[1].axes[0]
    assert with_zeros.yaxis.get_transform().linthresh == 1e-3 and with_zeros.get_ylim()[0] == 0


def test_the_caption_gallery_puts_each_models_caption_under_its_image():
    from resrepro.report.render import caption_gallery

    samples = pd.DataFrame([
        {"table": "sas-t5", "model": "Baseline", "image": "7", "thumbnail": "data:a", "reference": "r7", "caption": "b7"},
        {"table": "sas-t5", "model": "Baseline", "image": "3", "thumbnail": "data:b", "reference": "r3", "caption": "b3"},
        {"table": "sas-t5", "model": "+ Proposal", "image": "7", "thumbnail": "data:a", "reference": "r7", "caption": "p7"},
        {"table": "sas-t5", "model": "+ Proposal", "image": "3", "thumbnail": "data:b", "reference": "r3", "caption": "p3"},
        {"table": "other", "model": "X", "image": "7", "thumbnail": "data:c", "reference": "r", "caption": "x"},
    ])
    assert caption_gallery(samples, "sas-t5") == [
        {"image": "7", "thumbnail": "data:a", "reference": "r7", "captions": [("Baseline", "b7"), ("+ Proposal", "p7")]},
        {"image": "3", "thumbnail": "data:b", "reference": "r3", "captions": [("Baseline", "b3"), ("+ Proposal", "p3")]},
    ]
    assert caption_gallery(samples, "sas-t3") == []


def test_reference_rows_follow_the_last_row_of_each_metric_they_give():
    """sas-t5's GLIED: its values as the paper prints them ("-": –), no run, after each metric's rows."""
    from resrepro.report.render import with_references

    table = {"references": [{"label": "GLIED", "source": "SAS, Table 5", "paper": {"bleu1": 80.4, "bleu2": None, "cider": 129.3}}]}
    views = [{"label": f"{model}, {m}", "metric": m, "paper": "1.00", "reproduced": "x", "n": 1, "verdict": ""}
             for m in ("bleu1", "bleu2", "cider") for model in ("Baseline", "+ Proposal")]
    out = with_references(views, table)
    assert [v["label"] for v in out] == ["Baseline, bleu1", "+ Proposal, bleu1", "GLIED", "Baseline, bleu2", "+ Proposal, bleu2", "GLIED",
                                         "Baseline, cider", "+ Proposal, cider", "GLIED"]
    glied = [v for v in out if v["label"] == "GLIED"]
    assert [v["paper"] for v in glied] == ["80.40", "–", "129.30"] and {v["verdict"] for v in glied} == {"reference"}
    assert {v["reproduced"] for v in glied} == {"not run (reference)"} and glied[0]["n"] == 0 and glied[0]["note"] == "SAS, Table 5"
    assert with_references(views, {}) == views


def test_the_summary_gives_each_claim_its_verdict_and_evidence_and_draws_every_row(report, tmp_path):
    """With the pipeline's claims (config/claims.yaml): a claim's verdict is unanimous over the rows
    that ran (rskip-t3: one row inconclusive, so the claim is), says what did not run, and a paper
    none of whose evidence ran says "not run"; the plot of every row decodes."""
    out = tmp_path / "summary.html"
    every = write_plan(tmp_path / "plan.json", read_plan(report.plan)["rows"], sorted(Path(TABLES).glob("*.yaml")),
                       sorted(Path(FIGURES).glob("*.yaml")), CLAIMS)
    cli.main(["judge", "--plan", str(every), "--aggregate-dir", str(report.aggregate)])
    html = render_report(report.aggregate, out, every)
    sas, rskip, noise = (table_rows(html, "summary", i) for i in range(3))
    by_claim = {r["the paper claims"][:40]: r for r in sas + rskip}
    bn = by_claim["Applying batch normalization has a negat"]
    assert (bn["verdict"], bn["evidence"], bn["rests on"]) == ("inconclusive", "sas-t7: 1 diverged, 1 inconclusive of 2 rows", "sas-t7")
    catastrophic = by_claim["If the shortcut is forced to play the mi"]
    assert (catastrophic["verdict"], catastrophic["evidence"]) == ("inconclusive", "rskip-t3: 3 supported, 1 inconclusive of 4 rows")
    recursive = by_claim["Recursively applying skip connection wit"]
    assert recursive["verdict"] == "supported"
    assert recursive["evidence"] == "rskip-t5: 2 supported of 2 rows; not in this run: rskip-t1, rskip-t2, rskip-t6, rskip-t7"
    assert {r["verdict"] for r in noise} == {"not run"}
    assert '<td class="not-run">not run</td>' in html and 'href="#sas-t7">sas-t7</a>' in html
    found = re.search(r'<img src="data:image/png;base64,([^"]+)" alt="paper value against reproduced value', html)
    assert base64.b64decode(found.group(1)).startswith(b"\x89PNG\r\n\x1a\n")
    assert html.index('id="summary"') < html.index('id="sas-t7"')  # at the top


def test_paper_against_reproduced_draws_rows_with_both_values_only(monkeypatch):
    """One marker per row with a paper value and a mean, in its metric's panel; nothing to draw: no figure."""
    drawn = {}
    monkeypatch.setattr(figures, "to_png", lambda fig: drawn.setdefault("fig", fig) and b"png")
    rows = pd.DataFrame({"paper_id": ["sas", "sas", "rskip", "rskip"], "metric": ["test_accuracy", "test_accuracy", "bleu", "bleu"],
                         "paper": [93.7, 94.1, 30.0, None], "mean": [95.0, float("nan"), 28.0, 27.0],
                         "verdict": ["baseline", "supported", "contradicted", "inconclusive"]})
    assert figures.paper_against_reproduced(rows) == b"png"
    axes = [ax for ax in drawn["fig"].axes if ax.collections]
    assert [ax.get_title() for ax in axes] == ["test accuracy", "bleu"]
    offsets = [[tuple(c.get_offsets()[i]) for c in ax.collections for i in range(len(c.get_offsets()))] for ax in axes]
    assert offsets == [[(93.7, 95.0)], [(30.0, 28.0)]]
    assert tuple(axes[1].collections[0].get_facecolor()[0][:3]) == pytest.approx(matplotlib.colors.to_rgb(figures.VERDICT_COLOURS["contradicted"]))
    assert figures.paper_against_reproduced(rows.assign(mean=float("nan"))) is None
    assert [ax.get_xscale() for ax in axes] == ["linear", "linear"]
    decay = pd.DataFrame({"paper_id": ["noise"] * 2, "metric": ["decay term"] * 2, "paper": [1e-3, 2e-3], "mean": [0.15, 0.01],
                          "verdict": ["", ""]})  # 150 times apart: log axes, or the paper's values sit on one point
    drawn.clear()
    figures.paper_against_reproduced(decay)
    (ax,) = [ax for ax in drawn["fig"].axes if ax.collections]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    drawn.clear()
    figures.paper_against_reproduced(decay.assign(mean=[0.09, 0.01]))  # 90 times apart: linear
    assert [ax.get_xscale() for ax in drawn["fig"].axes if ax.collections] == ["linear"]


@pytest.mark.parametrize("n, text", [(None, "–"), (float("nan"), "–"), (4, "4"), (4.0, "4"), (float("inf"), "> 1000")])
def test_seeds_needed_reads_as_a_count(n, text):
    assert render_module.fmt_seeds(n) == text


@pytest.mark.parametrize("runs, resolved, text", [
    (5, False, "the paper's 5 runs could not resolve its own difference"),
    (1, False, "the paper's 1 run could not resolve its own difference (one run has no spread)"),
    (5, True, ""), (5, float("nan"), ""), (float("nan"), False, ""), (5, np.bool_(False), "the paper's 5 runs could not resolve its own difference"),
])
def test_the_mark_of_a_claim_the_papers_runs_could_not_resolve(runs, resolved, text):
    assert render_module.unresolved_note(runs, resolved) == text


def test_seeds_needed_and_the_mark_in_the_table(report, tmp_path):
    """Each compared row shows its seeds needed (rows.csv's, as a count); a row whose paper runs
    could not resolve its difference carries the mark with the reason on hover; baselines show none."""
    rows = pd.read_csv(report.aggregate / "rows.csv")
    rows["paper_resolved"] = rows["paper_resolved"].astype(object)  # all empty here: read back as float
    at = (rows["table"] == "rskip-t3") & (rows["label"] == "0.5x + F")
    rows.loc[at, ["paper_runs", "paper_resolved"]] = [1, False]
    marked = shutil.copytree(report.aggregate, tmp_path / "marked")
    files.write_text(marked / "rows.csv", rows.to_csv(index=False))
    html = render_report(marked, tmp_path / "marked.html", report.plan)
    cells = {c["row"]: c for c in table_rows(html, "rskip-t3")}
    expected = rows[rows["table"] == "rskip-t3"].set_index("label")["seeds_needed"]
    for label in ("LN(0.5x + F)", "LN(x + 2F)", "LN(x + 3F)"):
        assert cells[label]["seeds needed"] == render_module.fmt_seeds(expected[label]) != "–", label
    assert cells["0.5x + F"]["seeds needed"] == render_module.fmt_seeds(expected["0.5x + F"]) + " ⚑"
    assert 'title="the paper\'s 1 run could not resolve its own difference (one run has no spread)">⚑' in html.replace("&#39;", "'")
    assert cells["x + F"]["seeds needed"] == ""
    assert "The paper's runs per value: 5 (" in html and "The paper's runs per value: not stated." in html  # sas-t7, rskip-t3


def test_ran_as_says_the_data_models_training_and_seeds_a_table_really_ran():
    """Grouped by what ran: two paper datasets on one stand-in, two paper depths on one net, a
    row with fewer seeds; the paper's own dataset (paper scale) is named once, not 'standing for' itself."""
    trows = pd.DataFrame({"dataset": ["digits", "digits", "digits", "cifar10"], "paper_dataset": ["cifar10", "cifar100", "cifar10", "cifar10"],
                          "arch": ["preact_resnet32", "preact_resnet32", "preact_resnet14", "preact_resnet110"],
                          "paper_model": ["depth 110", "depth 56", "depth 32", "depth 110"], "n_runs": [3, 3, 1, 5]})
    runs = pd.DataFrame({"train_length": ["6 epochs", "6 epochs", "20 epochs", None]})
    assert render_module.ran_as(trows, runs, "mini") == (
        "Ran at mini scale on 8x8 digits (scikit-learn's, 1,297 train / 500 test images) standing for CIFAR-10 and CIFAR-100; CIFAR-10; "
        "preact_resnet32 for the paper's depth 110 and depth 56; preact_resnet14 for the paper's depth 32; preact_resnet110 for the paper's depth 110; "
        "6 epochs and 20 epochs; 1-5 seeds per row.")
    one = render_module.ran_as(trows.iloc[:1].assign(n_runs=1), runs.iloc[:0], "tiny")
    assert one == "Ran at tiny scale on 8x8 digits (scikit-learn's, 1,297 train / 500 test images) standing for CIFAR-10; preact_resnet32 for the paper's depth 110; 1 seed per row."


def test_ran_as_says_when_only_the_first_test_sentences_were_scored():
    trows = pd.DataFrame({"dataset": ["wmt14_en_de"] * 2, "paper_dataset": ["wmt14_en_de"] * 2, "arch": ["transformer_big"] * 2,
                          "paper_model": ["size big"] * 2, "n_runs": [1, 1]})
    runs = pd.DataFrame({"train_length": ["20 updates"] * 2, "test_sentences": [32, 32], "test_split_sentences": [3003, 3003]})
    assert render_module.ran_as(trows, runs, "rehearsal") == (
        "Ran at rehearsal scale on WMT14 EN-DE; transformer_big for the paper's size big; 20 updates; "
        "scored on the first 32 of 3,003 test sentences; 1 seed per row.")
    whole = runs.assign(test_sentences=[3003, 3003])
    assert "scored" not in render_module.ran_as(trows, whole, "paper")


def test_a_figure_says_the_data_nets_examples_and_seeds_it_really_measured():
    """sas-f3's caption gives the paper's 10,000 examples; the line beside it says what ran."""
    fdata = pd.DataFrame({"label": ["add", "add", "add", "sas"], "run": ["c/add/seed0", "c/add/seed0", "c/add/seed1", "c/sas/seed0"],
                          "examples": [1297.0, 500.0, 1297.0, 1297.0]})
    runs = pd.DataFrame({"run": ["c/add/seed0", "c/add/seed1", "c/sas/seed0", "other"], "dataset": ["digits", "digits", "digits", "cifar10"],
                         "arch": ["preact_resnet32", "preact_resnet32", "preact_resnet14", "preact_resnet110"]})
    assert render_module.figure_ran_as(fdata, runs, "mini") == (
        "Ran at mini scale on 8x8 digits (scikit-learn's, 1,297 train / 500 test images); preact_resnet32 and preact_resnet14; "
        "1,297 and 500 examples a measurement; 1-2 seeds per cell.")
    three = pd.DataFrame({"label": ["a", "b", "b", "c", "c", "c"], "run": ["r0", "r0", "r1", "r0", "r1", "r2"]})
    named = pd.DataFrame({"run": ["r0", "r1", "r2"], "dataset": ["my_data"] * 3, "arch": ["net"] * 3})
    assert render_module.figure_ran_as(three, named, "mini") == "Ran at mini scale on my_data; net; 1-3 seeds per cell."
    one = render_module.figure_ran_as(fdata.iloc[3:].drop(columns="examples"), runs, "tiny")
    assert one == "Ran at tiny scale on 8x8 digits (scikit-learn's, 1,297 train / 500 test images); preact_resnet14; 1 seed per cell."
    assert render_module.figure_ran_as(fdata.assign(run="gone"), runs, "mini") == ""


def test_every_table_says_how_it_ran(report):
    for table_id, length in (("sas-t7", "2 epochs"), ("rskip-t3", "2 epochs"), ("rskip-t5", "20 updates")):
        section = report.html[report.html.index(f'<section id="{table_id}">'):]
        caption = section[:section.index("</p>")]
        assert f"{length}; 3 seeds per row." in caption and "Ran at tiny scale on" in caption, table_id


def test_the_tidy_tables_download_from_the_report_itself(report):
    """Each tidy table of the aggregate is a data: link whose bytes are the file's, named by scale."""
    links = dict(re.findall(r'<a download="resrepro-tiny-([a-z_]+\.csv)" href="data:text/csv;base64,([^"]+)">', report.html))
    assert list(links) == [name for name in render_module.TIDY_TABLES if (report.aggregate / name).exists()]
    assert {"rows.csv", "runs.csv", "curves.csv"} <= set(links)
    for name, data in links.items():
        assert base64.b64decode(data) == (report.aggregate / name).read_bytes(), name
    lines = (report.aggregate / "rows.csv").read_text().count("\n") - 1
    assert f'rows.csv</a> <span class="small">({lines} lines)</span>' in report.html


def test_contents_and_anchors_lead_to_every_table(report):
    contents = report.html[report.html.index('<nav id="contents">'):report.html.index("</nav>")]
    for table_id in ("sas-t7", "rskip-t3", "rskip-t5"):
        assert f'<a href="#{table_id}">{table_id}</a>' in contents
        assert f'<h3>{table_id} <a class="anchor" href="#{table_id}"' in report.html
    assert '<a href="#summary">' in contents and '<a href="#provenance">' in contents and '<a href="#unfinished">' in contents


def test_each_row_links_to_its_runs_on_demand_and_the_figures_are_files(report, tmp_path):
    """With the results folder given: each row's runs, folded, each a link relative to the report's
    folder; with a figures folder: each embedded image also as <id>.png, the same bytes."""
    out, pngs = tmp_path / "report" / "tiny" / "index.html", tmp_path / "report" / "tiny" / "figures"
    results = tmp_path / "results" / "tiny"
    out.parent.mkdir(parents=True)
    cli.main(["report", "--plan", str(report.plan), "--aggregate-dir", str(report.aggregate), "--template", "report/templates/index.html.j2",
              "--out", str(out), "--results-dir", str(results), "--figures-dir", str(pngs)])
    html = out.read_text()
    plan = {(r["table"], r["label"]): r["runs"] for r in read_plan(report.plan)["rows"]}
    cells = {c["row"]: c for c in table_rows(html, "sas-t7")}
    assert cells["SAS with LN"]["runs"] == "3 runsseed0, seed1, seed2"  # the summary, then the links it folds
    for run in plan[("sas-t7", "SAS with LN")]:
        assert f'<a href="../../results/tiny/{run}/">{run.rsplit("/", 1)[-1]}</a>' in html
    assert {p.name for p in pngs.iterdir()} == {"summary.png"}  # the fixture has no training logs: no curves to draw
    found = re.search(r'<img src="data:image/png;base64,([^"]+)" alt="paper value against reproduced value', html)
    assert (pngs / "summary.png").read_bytes() == base64.b64decode(found.group(1))
    assert "run_links" not in html and table_rows(render_report(report.aggregate, tmp_path / "plain.html", report.plan), "sas-t7")[0]["runs"] == ""


def test_embedded_images_are_named_by_their_table_or_figure_id():
    """Each data URI of the context, decoded, under <id>.png; a section or figure without an image
    (no training log, nothing measured, not reproduced) writes no file."""
    png = lambda tag: b"\x89PNG" + tag  # noqa: E731
    context = {"paper_against_reproduced": data_uri(png(b"s")), "papers": [
        {"sections": [{"id": "sas-t4", "figure": data_uri(png(b"t"))}, {"id": "sas-t7", "figure": None}],
         "figures": [{"id": "sas-f3", "image": data_uri(png(b"f"))}, {"id": "sas-f4", "image": None}, {"id": "noise-f11"}]}]}
    assert render_module.embedded_images(context) == {"summary.png": png(b"s"), "sas-t4.png": png(b"t"), "sas-f3.png": png(b"f")}


def test_downloads_count_data_lines_and_skip_missing_tables(tmp_path):
    (tmp_path / "rows.csv").write_text("table,label\nt,a\nt,b\n")
    (tmp_path / "curves.csv").write_text("run,epoch\n")  # a header only: no data line
    got = render_module.downloads(tmp_path)
    assert [(d["name"], d["lines"]) for d in got] == [("rows.csv", 2), ("curves.csv", 0)]
    assert base64.b64decode(got[0]["uri"].removeprefix("data:text/csv;base64,")) == b"table,label\nt,a\nt,b\n"


def test_listed_reads_as_a_sentence_and_unknown_datasets_keep_their_name():
    assert render_module._listed([1]) == "1"
    assert render_module._listed(["a", "b"]) == "a and b"
    assert render_module._listed(["a", "b", "a", "c", "d"]) == "a, b, c and d"  # each once, in order
    trows = pd.DataFrame({"dataset": ["my_data"], "paper_dataset": ["cifar10"], "arch": ["net"], "paper_model": ["depth 20"], "n_runs": [2]})
    assert render_module.ran_as(trows, pd.DataFrame(), "custom") == "Ran at custom scale on my_data standing for CIFAR-10; net for the paper's depth 20; 2 seeds per row."
    theirs = trows.assign(paper_dataset="imagenet")
    assert render_module.ran_as(theirs, pd.DataFrame(), "custom").startswith("Ran at custom scale on my_data standing for imagenet; ")


def test_the_section_beyond_the_papers_shows_only_when_selected(tmp_path):
    """The tables beyond the papers are opt-in: a report without them has no heading for them."""
    from fake_runs import plan_for, write_metrics

    from resrepro.analysis.aggregate import aggregate

    for tables, expected in ((["rskip-t3"], False), (["rskip-t3", "beyond-t1"], True)):
        results = tmp_path / "-".join(tables) / "results"
        plan = plan_for(tables, seeds=2)
        for path, run in plan.runs.items():
            write_metrics(results, path, 5.0 + run.seed)
        agg_dir = tmp_path / "-".join(tables) / "agg"
        out = aggregate(plan.rows, results, TABLES, "final")
        agg_dir.mkdir()
        for name in ("rows", "runs", "curves", "caption_samples"):
            out[name].to_csv(agg_dir / f"{name}.csv", index=False)
        resolved = plan_document("tiny", load_tables(TABLES), {}, None, plan.rows, [])
        context = render_module.build_context(agg_dir, resolved, {}, results_dir=results, report_dir=tmp_path)
        assert ("beyond" in [p["id"] for p in context["papers"]]) == expected


def test_a_figure_that_draws_what_another_draws_says_it_repeats_it(tmp_path):
    """At mini scale CIFAR-100 runs as the CIFAR-10 stand-in: iter-f10 draws what iter-f4 draws (the
    same runs, quantity and values, whatever the cells' labels). Its section and the claims citing
    it say so; a figure drawing another quantity of the same runs does not."""
    from resrepro.report import render as render_module

    rows = [{"figure": f, "cell": 0 if f != "iter-f10" else 3, "label": label, "run": "c/add/seed0", "seed": 0, "block": b, "split": "train",
             "quantity": quantity, "value": -0.1 * b} for f, label, quantity in (("iter-f4", "original ResNet-110", "cos"),
                                                                                ("iter-f10", "original ResNet-110 (CIFAR-100)", "cos"),
                                                                                ("iter-f2", "original ResNet-110", "||F(h)|| / ||h||"))
            for b in (1, 2)]
    pd.DataFrame(rows).to_csv(tmp_path / "figures.csv", index=False)
    pd.DataFrame([{"figure": f, "cell": 0, "label": "original ResNet-110", "measurement": m, "kind": "per_block", "n": 1, "n_runs": 1,
                   "summary": "s"} for f, m in (("iter-f4", "grad_cosine"), ("iter-f10", "grad_cosine"), ("iter-f2", "l2_ratio"))]
                 ).to_csv(tmp_path / "figure_cells.csv", index=False)
    sections = {s["id"]: s for s in render_module._figure_sections(tmp_path, load_figures([f"{FIGURES}/iter.yaml"]), "iter")}
    assert sections["iter-f10"]["same_as"] == "iter-f4"
    assert sections["iter-f4"]["same_as"] is None and sections["iter-f2"]["same_as"] is None  # first; another quantity
    claim = {"claim": "c", "cited": [("iter-f4", "iter-f4"), ("iter-f10", "iter-f10: check 1"), ("iter-f10", "iter-f10: check 2")], "evidence": "iter-f4: 1 supported of 1 check; iter-f10: 1 supported of 1 check"}
    assert render_module.with_repeats(claim, {"iter-f10": "iter-f4"})["evidence"] == (
        "iter-f4: 1 supported of 1 check; iter-f10: 1 supported of 1 check (iter-f10 repeats iter-f4: the same runs at this scale)")
    assert render_module.with_repeats(claim, {}) == claim
    both = render_module.with_repeats({**claim, "cited": [("iter-f10", "iter-f10"), ("iter-f11", "iter-f11")]},
                                      {"iter-f10": "iter-f4", "iter-f11": "iter-f2"})
    assert both["evidence"].endswith("(iter-f10 repeats iter-f4; iter-f11 repeats iter-f2: the same runs at this scale)")
    pd.DataFrame([r for r in rows if r["figure"] == "iter-f2"]).to_csv(tmp_path / "figures.csv", index=False)  # nothing measured
    unmeasured = {s["id"]: s for s in render_module._figure_sections(tmp_path, load_figures([f"{FIGURES}/iter.yaml"]), "iter")}
    assert unmeasured["iter-f10"]["same_as"] is None  # two figures without data repeat nothing
