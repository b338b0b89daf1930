"""Integration: Snakemake on a tiny config end to end, then what reruns after which change.

The workflow is copied into a temporary folder, so the tests never touch results/ or report/
of the checkout. `snakemake` comes from the running interpreter's venv.
"""

import html as html_text
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import browser
import pandas as pd
import pytest
import torch
import yaml
from report_html import row_by_label, table_rows

from resrepro import experiments
from resrepro.evaluate.bleu import read_lines, sacre_bleu, tokenized_bleu
from resrepro.evaluate.captioning import spice_status
from resrepro.residual import ConfigError

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
COPIED = ["Snakefile", "workflow", "config", "profiles", "report/templates", "envs"]


def snakemake(workdir: Path, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**(env or os.environ), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([str(BIN / "snakemake"), *args], cwd=workdir, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def planned_jobs(workdir: Path, *args: str) -> dict[str, int]:
    """Jobs per rule that a dry run would execute (from its "Job stats" table)."""
    out = snakemake(workdir, "-n", *args)
    text = out.stdout + out.stderr
    if "Nothing to be done" in text:
        return {}
    stats = text[text.index("Job stats:") :]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", stats, re.M) if m.group(1) != "total"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("workflow")
    for item in COPIED:
        src = REPO / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / item)
    shutil.copy(REPO / "tests" / "configs" / "tiny.yaml", root / "tiny.yaml")
    snakemake(root, "--cores", "2", "--configfile", "tiny.yaml")
    return root


def selected_tables(workdir) -> dict:
    """The tables `tables: all` selects: every paper's, not the opt-in ones beyond the papers."""
    return {t: table for t, table in experiments.load_tables(workdir / "config" / "tables").items() if table["paper"] != experiments.BEYOND}


# What a change reruns after its own jobs: the plan's file and all that reads it; the aggregate's
# tables and all that reads them; the claims and figures' checks (checks.json) and all that reads them.
AFTER_AGGREGATE = {"aggregate": 1, "judge": 1, "report": 1, "all": 1}
AFTER_PLAN = {"plan": 1, "parameters": 1, **AFTER_AGGREGATE}
AFTER_CHECKS = {"checks": 1, "judge": 1, "report": 1, "all": 1}


def tiny_config(workdir):
    return yaml.safe_load((workdir / "tiny.yaml").read_text())


def test_report_holds_every_table_with_paper_and_reproduced_values(workdir):
    html = (workdir / "report" / "tiny" / "index.html").read_text()
    tables = selected_tables(workdir)
    rows = pd.read_csv(workdir / "results" / "tiny" / "aggregate" / "rows.csv")
    assert len(rows) == sum(len(t["rows"]) for t in tables.values())
    spice, _ = spice_status()
    for table_id, table in tables.items():
        cells = table_rows(html, table_id)
        # other work the paper prints (sas-t5's GLIED): its values, no run, after the rows of each metric
        references = [(c["row"], c["metric"], c["paper"]) for c in cells if c["verdict"] == "reference"]
        assert references == [(ref["label"], metric.replace("_", " "), "–" if v is None else f"{v:.2f}")
                              for ref in table.get("references", []) for metric, v in ref["paper"].items()]
        cells = [c for c in cells if c["verdict"] != "reference"]
        assert [c["row"] for c in cells] == [r["label"] for r in table["rows"]]
        for cell, row, (_, agg) in zip(cells, table["rows"], rows[rows["table"] == table_id].iterrows()):
            if experiments.row_metric(table, row) == "spice" and not spice:  # no CoreNLP jars here: said so, with the way to get them
                assert cell["reproduced"] == "no result" and cell["per seed"] == "unavailable", cell
                assert cell["note"].startswith("SPICE unavailable: ") and "get_stanford_models" in cell["note"]
                continue
            # paper 002's losses to 4 decimals (0.0723), its measured quantities to 4 significant digits (2.012e-06)
            shown = "{:.4g}" if "quantity" in row else "{:.4f}" if experiments.row_metric(table, row) == "train_loss" else "{:.2f}"
            assert cell["paper"] == ("–" if row["paper"] is None else shown.format(row["paper"]))  # lost in our copy of the paper
            assert cell["reproduced"] == f"{shown.format(agg['mean'])} ± –"  # one seed: no spread
            assert cell["n"] == "1/1" and cell["Δ"] == ("–" if row["paper"] is None else shown.format(agg["mean"] - row["paper"]))
            if table["task"] == "translation":
                assert cell["sacreBLEU"] == f"{agg['sacrebleu']:.2f}" and cell["parameters at paper size (vocabulary)"].endswith("M (32,768)")
    for paper in ("sas", "rskip", "noise", "iter"):
        assert f'id="paper-{paper}"' in html
    # sas-t5: its training (cross-entropy, then the tiny config's self-critical updates) and a
    # gallery of test images, each with both models' captions, as captions.tsv holds them
    caption_section = html[html.index('<section id="sas-t5">') :]
    caption_section = html_text.unescape(caption_section[: caption_section.index("</section>")])
    scst = tiny_config(workdir)["captioning"]["scst"]["updates"]
    assert f"training: cross-entropy, then {scst} self-critical updates on CIDEr-D" in caption_section
    samples = pd.read_csv(workdir / "results" / "tiny" / "aggregate" / "caption_samples.csv", keep_default_na=False)
    assert len(samples) == 2 * 6 and caption_section.count('<figure class="caption-sample"><img src="data:image/png;base64,') == 6
    for sample in samples.itertuples():
        captions_tsv = (workdir / "results" / "tiny" / sample.run / "captions.tsv").read_text().splitlines()
        assert f"{sample.image}\t{sample.caption}" in captions_tsv and f"<b>{sample.model}:</b> {sample.caption}" in caption_section
    noise = table_rows(html, "noise-t1")
    assert noise[0]["metric"] == "risk" and noise[-1]["metric"] == "test error"  # each row names its metric (risk: measured)
    shows = {  # what each measurement's summary says, per cell
        "sas_gates": r"alpha > 0.9 in \d of \d+ blocks; .* rho = (?:[+-]\d\.\d\d|none \(one block\))",  # the middle stage: one block at the tiny depth
        "l2_ratio": r"train: block 1 \d+\.\d\d, .*; test: block 1 .*",
        "block_drop": r"test: whole net \d+\.\d%; dropping block 1 .* blocks cost under 1 point",
        "grad_cosine": r"train: negative in \d+ of \d+ blocks; .*; test: .*",
        "grad_norm": r"train: blocks \d+-\d+, mean .*, Spearman rho with depth .*",
        "learning_curve": r"(training|held-out) (loss|error \(%\)) .* at epoch 1, .* at epoch 2, lowest [^;]*(; .*)?",
        # two epochs reach no training-loss level in the tiny config: a figure without points, said so
        "error_at_loss": r"no run reached any of the training-loss levels|\d.*% at training loss .*",
        "borderline": r"train: \d+\.\d% of the examples borderline, .*; test: .*entropy .*",
        "skip_weight": r"blocks \d+-\d+: \|\|w\|\| \d+\.\d\d on average .*, \d+\.\d\d per dimension",
        "skip_scale": r"train: blocks \d+-\d+, mean effective scale \d+\.\d\d \(from .*\)",
        "over_training": r"(accuracy|cos|\|\|F).*, test: at epoch 2 block \d+ .* -> block \d+ .*; mean over blocks .* at epoch 0 -> .*",
        "unroll": r"train: over 20 extra steps, borderline examples .*; test: over 20 extra steps, .*loss .*",
        "unroll_blocks": r"block \d+ unrolled; train, scale 1: cos negative on \d+ of 20 extra steps.*; test, scale 0.05: .*",
        "stage_norms": r"\|\|dL/dh\|\|, first block of the first stage / of the last stage, train: .* at epoch 0, .* at epoch 2, largest .*; .*test: .*",
        "layer_cushion": r"median cushion \S+ at block 1, \S+ at block \d+, \S+ at block \d+; mean over the \d+ blocks \S+",
        "interlayer_cushion": r"median cushion \S+ at block 1, \S+ at block \d+, \S+ at block \d+; mean over the \d+ blocks \S+",
        "final_activations": r"final activation / its std: mean / std \S+, skewness \S+, excess kurtosis \S+; gradient of the loss .*",
        "dominant_flow": r"after the first step: mean fraction \S+ over \d+ blocks .*; epoch 2: mean fraction \S+ over \d+ blocks .*",
        "weight_histogram": r"epoch 0: ID entries' mode \S+, \d+ weights beyond 0.7 in magnitude; epoch 2: ID entries' mode \S+, \d+ weights beyond 0.7 in magnitude",
        "gaussian_inequality": r"0\.006\d+ at ratio 0\.01, 0\.99\d* at 100; reaches 1/2 at ratio 1(\.26)?",  # computed: no run
        "trivial_flow_scale": r"fraction 0\.\d+ at gradient std 0\.01, 0\.\d+ at 100; range over the scales 0\.00\d+",  # computed: no run
        "trivial_flow_p": r"fraction 0 at p 0, 0\.\d+ at p 0\.5, 0\.\d+ at p 1; largest 0\.\d+ at p (1|0\.2)",  # computed: no run
    }
    figures = experiments.load_figures(workdir / "config" / "figures")
    assert {"sas-f3", "sas-f4", "rskip-f3", "iter-f2", "iter-f3", "iter-f4"} <= set(figures)
    for figure_id, figure in figures.items():  # each figure, drawn
        section = html[html.index(f'<section id="{figure_id}">') :]
        section = html_text.unescape(section[: section.index("</section>")])  # a claim may hold an apostrophe
        if figure.get("not_reproduced"):  # never silently missing: its section says why
            assert figure["claim"] in section and "Not reproduced: " in section and "data:image" not in section, figure_id
            continue
        reached = figure["measurement"] != "error_at_loss"  # a training-loss level no tiny run reaches: no points, said so
        assert figure["claim"] in section and ("data:image/png;base64," in section or not reached and "Nothing to draw" in section), figure_id
        cells = table_rows(html, figure_id)  # each cell, its one seed measured, then each difference drawn from them
        assert [c["cell"] for c in cells] == [c["label"] for c in [*figure["cells"], *figure.get("differences", [])]], figure_id
        for cell in cells:
            assert cell["runs measured"] == "1/1", figure_id
        if figure.get("checks"):  # each part of the claim checked on the measured rows: a verdict, not "no result"
            checks = table_rows(html, figure_id, which=0)
            # each part names its claim, then the sentence of the paper it tests
            assert [c["part of the claim checked"] for c in checks] == [" ".join((c["claim"] + c["source"]).split()) for c in figure["checks"]], figure_id
            assert {c["verdict"] for c in checks} <= {"supported", "contradicted", "inconclusive", "undecided", *(() if reached else ("no result",))}, (figure_id, checks)
            assert all(c["evidence (mean over seeds)"].startswith("not judged: ") for c in checks if c["verdict"] == "undecided"), (figure_id, checks)
            assert re.fullmatch(shows[figure["measurement"]], cell["this run shows (mean over its seeds)"]), (figure_id, cell)
    assert "data:image/png;base64," in html  # learning curves are embedded
    assert "Provenance" in html and "final-epoch" in html
    costed = [row["table"] for row in table_rows(html, "gpu-hours")]  # the paper scale's cost, every table and the total
    assert costed == [*selected_tables(workdir), "MSCOCO features", "total", "disk at the peak"]  # the opt-in tables beyond the papers are not costed
    metrics = list((workdir / "results" / "tiny").glob("*/*/*/*/*/seed0/metrics.json"))
    plan = experiments.make_plan(tiny_config(workdir) | {"tables_dir": str(workdir / "config" / "tables")})
    assert len(metrics) == len(plan.runs)
    assert all(path.endswith("seed0") for path in plan.runs), "the tiny config trains one seed per cell"
    # the summary: every claim of every paper, each with a verdict (all tables and figures ran: none "not run")
    claims = yaml.safe_load((workdir / "config" / "claims.yaml").read_text())
    for i, (paper, stated) in enumerate(claims.items()):
        shown = table_rows(html, "summary", which=i)
        assert [c["the paper claims"] for c in shown] == [c["claim"] for c in stated], paper
        assert {c["verdict"] for c in shown} <= {"supported", "contradicted", "inconclusive", "undecided", "diverged", "no result"}, (paper, shown)
    assert html.index('id="summary"') < html.index('id="sas-t4"')
    for table_id in tables:  # every caption says what really ran (issue 15: honest scale)
        section = html[html.index(f'<section id="{table_id}">'):]
        assert re.search(r'class="ran-as">Ran at tiny scale on .+; \d+ (epochs|updates)[^;]*; 1 seed per row\.<', section[:section.index("</p>")]), table_id


def test_the_report_in_headless_chromium(workdir, tmp_path):
    """The tiny report opened in a real browser, network off: every table and figure section is
    there and visible, every image decodes, the console has no error, no cell reads "nan" or "undefined", a click on a column's header
    sorts its rows (again: the other way), and a screenshot is kept under the test's folder."""
    if (why := browser.install()) is not None:
        if os.environ.get(browser.REQUIRE) == "1":
            pytest.fail(f"{browser.REQUIRE}=1 but {why}")
        pytest.skip(why)
    from selenium.webdriver.common.by import By

    ids = ["summary", *selected_tables(workdir), *experiments.load_figures(workdir / "config" / "figures")]
    driver = browser.start()
    try:
        driver.get((workdir / "report" / "tiny" / "index.html").as_uri())
        hidden = [i for i in ids if not driver.find_element(By.ID, i).is_displayed()]
        assert hidden == []
        images = driver.execute_script("return Array.from(document.images).map(i => [i.alt, i.complete && i.naturalWidth > 0])")
        assert len(images) > len(ids) / 2 and [alt for alt, decoded in images if not decoded] == []
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
        # an empty value is shown as nothing, never as what pandas or JavaScript print for it
        text = driver.find_element(By.TAG_NAME, "body").text
        assert re.findall(r"\b(?:nan|NaN|undefined)\b", text) == []
        column = "return Array.from(document.querySelectorAll('#rskip-t1 table')[0].rows).slice(1).map(r => r.cells[arguments[0]].textContent.trim())"
        headers = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#rskip-t1 table tr:first-child th")]
        at = headers.index("paper")
        before = [float(v) for v in driver.execute_script(column, at)]
        driver.find_elements(By.CSS_SELECTOR, "#rskip-t1 table tr:first-child th")[at].click()
        assert [float(v) for v in driver.execute_script(column, at)] == sorted(before)
        driver.find_elements(By.CSS_SELECTOR, "#rskip-t1 table tr:first-child th")[at].click()
        assert [float(v) for v in driver.execute_script(column, at)] == sorted(before, reverse=True)
        assert sorted(before) != before or sorted(before, reverse=True) != before  # the order changed at least once
        # what a cell sorts by: seeds needed ("> 1000" above 765), parameter counts ("1.73M" above "467k")
        cells = ["> 1000", "765", "467k", "1.73M", "29,302,804", "<0.001", "6.30 ± 0.30", "+0.42", "−1.5", "–"]
        assert driver.execute_script("return arguments[0].map(sortNumber)", cells) == [
            1000, 765, 467000, 1730000, 29302804, 0.001, 6.3, 0.42, -1.5, None]
        shot = tmp_path / "report.png"
        driver.save_screenshot(str(shot))
        assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    finally:
        driver.quit()


def test_the_reports_images_are_files_and_snakemakes_own_report_holds_them(workdir, tmp_path):
    """report/tiny/figures/ has each image the report embeds as <table or figure id>.png (the
    summary's plot as summary.png), and `snakemake --report` builds, with the report, those
    figures and the tidy tables in their categories."""
    html = (workdir / "report" / "tiny" / "index.html").read_text()
    sections = re.findall(r'<section id="([^"]+)">(.*?)</section>', html, re.S)
    drawn = {f"{sid}.png" for sid, body in sections if "data:image/png;base64," in body and sid != "summary"} | {"summary.png"}
    pngs = workdir / "report" / "tiny" / "figures"
    assert {p.name for p in pngs.glob("*.png")} == drawn and len(drawn) > 30  # beside them, Snakemake's .snakemake_timestamp
    assert all(p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in pngs.glob("*.png"))
    out = tmp_path / "snakemake-report.html"
    snakemake(workdir, "--configfile", "tiny.yaml", "--report", str(out))
    text = out.read_text()
    assert all(category in text for category in ("Report", "Figures", "Tidy tables")), "a category is missing"
    assert all(name in text for name in ("index.html", "rows.csv", "runs.csv", "rskip-t1.png", "summary.png"))
    assert "This run's scale is" in text  # the workflow's description, rendered with the config


def dev_loss_of(checkpoint, spec: dict, workdir) -> float:
    """train/translation.dev_loss of a saved model on the synthetic dev split, as training runs it."""
    from resrepro import models
    from resrepro.data.translation import load_encoded
    from resrepro.specs import TranslationTrainSpec
    from resrepro.speed import speed_of
    from resrepro.train.translation import dev_examples, dev_loss

    train_spec, cpu = TranslationTrainSpec.of(spec), torch.device("cpu")
    model = models.from_checkpoint(torch.load(checkpoint, weights_only=True)).eval()
    dev = dev_examples(load_encoded(workdir / "results" / "data" / "synthetic", "dev"), train_spec)
    return dev_loss(model, dev, train_spec, cpu, speed_of(train_spec, cpu))


def test_translation_runs_are_scored_as_configured(workdir):
    """Per translation run: the average holds the `average_last` newest checkpoints, beam search
    used the config's settings, eval.json is BLEU recomputed from the files it wrote, and it holds
    the averaged model's dev loss beside the last checkpoint's."""
    cfg = tiny_config(workdir)["translation"]
    plan = experiments.make_plan(tiny_config(workdir) | {"tables_dir": str(workdir / "config" / "tables")})
    translation = [path for path, run in plan.runs.items() if run.task == "translation"]
    assert translation, "the tiny config covers the translation tables"
    newest = [f"step{s}.pt" for s in range(cfg["max_updates"], 0, -cfg["checkpoint_every"])][: cfg["average_last"]][::-1]
    for path in translation:
        run_dir = workdir / "results" / "tiny" / path
        averaged = torch.load(run_dir / "averaged.pt", weights_only=True)
        assert averaged["averaged_from"] == newest
        ev = json.loads((run_dir / "eval.json").read_text())
        assert (ev["beam"], ev["alpha"]) == (cfg["beam"], cfg["alpha"])
        hyp_tok, ref_tok = read_lines(run_dir / "hyp.tok.txt"), read_lines(run_dir / "ref.tok.txt")
        assert ev["sentences"] == len(hyp_tok) == len(ref_tok) > 0
        assert ev["bleu_tokenized"] == {**tokenized_bleu(hyp_tok, ref_tok), "tokenization": "the synthetic corpus's own tokens"}
        assert ev["sacrebleu"] == sacre_bleu(read_lines(run_dir / "hyp.detok.txt"), read_lines(run_dir / "ref.detok.txt"))
        assert ref_tok == read_lines(workdir / "results" / "data" / "synthetic" / "test.tgt")  # the test set's order
        # the dev loss of the averaged model, as training computes it, beside the last checkpoint's
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert ev["dev_loss_last"] == metrics["final"]["dev_loss"]
        assert ev["dev_loss_averaged"] == pytest.approx(dev_loss_of(run_dir / "averaged.pt", metrics["spec"], workdir))


def test_cpu_jobs_ran_as_forks_of_the_preload_server_which_then_ended(workdir):
    logs = [*workdir.glob("results/tiny/*/*/*/*/*/*/seeds*/train.log"), *workdir.glob("results/tiny/**/measure/*.log")]
    assert len(logs) > 20
    assert [log for log in logs if "preload: running in pid" not in log.read_text()] == []
    server = re.search(r"serving on (\S+) \(pid (\d+)\)", (workdir / ".snakemake" / "resrepro-preload.log").read_text())
    assert not os.path.exists(server.group(1)) and not Path(f"/proc/{server.group(2)}").exists()


def test_training_jobs_start_before_the_measurements(workdir):
    """The rule priorities (common.smk PRIORITY): every classification training job starts before
    the first measurement, so the short measurements fill the cores at the end. Each classification
    job is ready as soon as the digits are, so with the measurements' equal priority of before, a
    measurement of a finished run could start first."""
    first_run = sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"))[0].read_text()
    started = re.findall(r"^(?:local)?rule (\w+):$", first_run, re.M)
    assert "measure" in started and "train_classifier" in started
    first_measurement = started.index("measure")
    assert [i for i, rule in enumerate(started) if rule == "train_classifier" and i > first_measurement] == []


def test_second_run_does_nothing(workdir):
    assert planned_jobs(workdir, "--configfile", "tiny.yaml") == {}


def test_more_seeds_for_one_table_reruns_only_its_cells(workdir):
    """One job per cell (seeds_per_job: all): its new job trains seed 1 and finds seed 0 finished
    in its checkpoint; no other cell reruns. The measurements of its cells' seed 0 follow their
    job (a measurement waits for the job that trained its run): at mini scale, the cell's job."""
    cfg = tiny_config(workdir)
    plan = experiments.make_plan(cfg | {"tables_dir": str(workdir / "config" / "tables")})
    t4_cells = {plan.runs[run].cell_path for row in plan.rows if row["table"] == "rskip-t4" for run in row["runs"]}
    measured = len({(name, run) for run, name, _, _ in experiments.measured(plan) if plan.runs[run].cell_path in t4_cells})
    jobs = planned_jobs(workdir, "--configfile", "tiny.yaml", "--config", "table_seeds={rskip-t4: 2}")
    assert measured > 0 and jobs == {"train_classifier": len(t4_cells), "measure": measured, **AFTER_PLAN}
    assert cfg["seeds"] == 1


def test_a_nested_recipe_override_on_the_command_line_reruns_that_task(workdir):
    """`--config classification='{epochs: 3, lr: 0.05}'`: Snakemake passes "3" and "0.05" as strings;
    they are typed by the schema, so the override validates and reruns every classification run."""
    plan = experiments.make_plan(tiny_config(workdir) | {"tables_dir": str(workdir / "config" / "tables")})
    n_classification = sum(job.startswith("classification/") for job in plan.jobs)
    jobs = planned_jobs(workdir, "--configfile", "tiny.yaml", "--config", "classification={epochs: 3, lr: 0.05}")
    n_measured = len({(name, run) for run, name, _, _ in experiments.measured(plan)})  # a retrained run is measured again
    assert jobs == {"train_classifier": n_classification, "measure": n_measured, **AFTER_PLAN}


def test_training_seeds_side_by_side_reruns_nothing(workdir):
    """seeds_in_parallel only says how a job schedules its seeds on its device: the runs are the same."""
    assert planned_jobs(workdir, "--configfile", "tiny.yaml", "--config", "seeds_in_parallel=2") == {}


def test_training_seeds_stacked_reruns_nothing_and_refuses_side_by_side_too(workdir):
    """seeds_stacked only says how a job trains its seeds on its device: the runs are the same (to
    float rounding, tests/test_stacked_training.py). With seeds_in_parallel it is refused at parse."""
    assert planned_jobs(workdir, "--configfile", "tiny.yaml", "--config", "seeds_stacked=true") == {}
    forced = snakemake(workdir, "-n", "-p", "--configfile", "tiny.yaml", "--config", "seeds_stacked=true", "--forcerun", "train_classifier",
                       "--until", "train_classifier")
    commands = [line for line in forced.stdout.splitlines() if " train classification --spec " in line]
    assert commands and all(" --stack 1 " in line for line in commands)
    with pytest.raises(ConfigError, match="seeds_stacked trains a job's seeds as one program"):
        experiments.make_plan(tiny_config(workdir) | {"tables_dir": str(workdir / "config" / "tables"), "seeds_stacked": True,
                                                      "seeds_in_parallel": 2})


def test_turning_the_preload_server_off_reruns_nothing(workdir):
    """preload_cpu_jobs only says how CPU jobs start: the runs and their results are the same."""
    assert planned_jobs(workdir, "--configfile", "tiny.yaml", "--config", "preload_cpu_jobs=false") == {}


def test_changing_one_rows_lam_reruns_only_that_cell(workdir):
    path = workdir / "config" / "tables" / "rskip.yaml"
    original = path.read_text()
    try:
        path.write_text(original.replace("variant: xskip, args: {lam: 3}, paper: 9.23", "variant: xskip, args: {lam: 4}, paper: 9.23"))
        assert planned_jobs(workdir, "--configfile", "tiny.yaml") == {"train_classifier": 1, "gpu_hours": 1, **AFTER_PLAN}
    finally:
        path.write_text(original)
    assert planned_jobs(workdir, "--configfile", "tiny.yaml") == {}


def _n_translation_jobs(workdir):
    plan = experiments.make_plan(tiny_config(workdir) | {"tables_dir": str(workdir / "config" / "tables")})
    return sum(job.startswith("translation/") for job in plan.jobs)


@pytest.mark.parametrize(
    "override, evaluation_rules",
    [
        ("translation={beam: 3}", ["evaluate_translation", "plan"]),
        ("translation={alpha: 1.0, max_len_b: 4}", ["evaluate_translation", "plan"]),
        ("translation={average_last: 1}", ["evaluate_translation", "plan"]),
        ("report_epoch=best", []),
    ],
)
def test_an_evaluation_setting_never_retrains(workdir, override, evaluation_rules):
    """Beam, length penalty, limits and average_last rerun the evaluation (averaging, decoding,
    scoring); the report's epoch only the aggregate. No training job is planned, so no checkpoint
    is lost."""
    n = _n_translation_jobs(workdir)
    jobs = planned_jobs(workdir, "--configfile", "tiny.yaml", "--config", override)
    after = AFTER_PLAN if "plan" in evaluation_rules else AFTER_AGGREGATE
    assert jobs == {**{rule: n for rule in evaluation_rules if rule != "plan"}, **after}


def test_editing_a_caption_reruns_only_the_aggregate_the_cost_and_the_report(workdir):
    """The table file changed, so its costs are counted again (a second, no training)."""
    path = workdir / "config" / "tables" / "sas.yaml"
    original = path.read_text()
    try:
        path.write_text(original.replace("Higher means better.", "Higher is better.", 1))
        assert path.read_text() != original
        assert planned_jobs(workdir, "--configfile", "tiny.yaml") == {"gpu_hours": 1, **AFTER_PLAN}
    finally:
        path.write_text(original)


def test_a_figure_setting_remeasures_and_its_claim_rerenders_without_retraining(workdir):
    path = workdir / "config" / "figures" / "sas.yaml"
    original = path.read_text()
    try:
        path.write_text(original.replace("claim: \"alpha is greater", "claim: \"Alpha is greater", 1))
        # checks.json holds the figure's claim, plan.json does not: the judge and the report, not the aggregate
        assert planned_jobs(workdir, "--configfile", "tiny.yaml") == AFTER_CHECKS
        path.write_text(original.replace("examples: 10000", "examples: 100", 1))
        assert planned_jobs(workdir, "--configfile", "tiny.yaml") == {"measure": 1, **AFTER_PLAN, "checks": 1}
    finally:
        path.write_text(original)


def test_editing_a_claim_reruns_only_the_judge_and_the_report(workdir):
    """The claims are the judge's alone (checks.json): editing one aggregates nothing again."""
    path = workdir / "config" / "claims.yaml"
    original = path.read_text()
    try:
        path.write_text(original.replace("claim: \"", "claim: \"Edited: ", 1))
        assert path.read_text() != original
        assert planned_jobs(workdir, "--configfile", "tiny.yaml") == AFTER_CHECKS
    finally:
        path.write_text(original)


def test_editing_the_template_reruns_only_the_report(workdir):
    path = workdir / "report" / "templates" / "index.html.j2"
    original = path.read_text()
    try:
        path.write_text(original.replace("</body>", "<!-- edited --></body>"))
        assert planned_jobs(workdir, "--configfile", "tiny.yaml") == {"report": 1, "all": 1}
    finally:
        path.write_text(original)


# A few of the malformed configs through Snakemake, to show that nothing starts: one caught by the
# schema, one by the plan, one nested override typed first (all 13 run in-process in test_experiments).
@pytest.mark.parametrize(
    "override, message",
    [
        ("seeds=two", "seeds"),
        ("tables=[rskip-t99]", "unknown table 'rskip-t99'"),
        ("classification={epochs: 0}", "epochs"),
    ],
)
def test_bad_config_fails_before_any_job(workdir, override, message):
    proc = snakemake(workdir, "-n", "--configfile", "tiny.yaml", "--config", override, check=False)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert "Job stats" not in proc.stdout + proc.stderr


GOOD_ROW = {"label": "x+F", "dataset": "cifar10", "depth": 20, "variant": "add", "paper": 8.0}  # as in test_experiments


@pytest.mark.parametrize(
    "row, message",
    [
        ({"variant": "resnext"}, "rows[0].args: unknown variant 'resnext'"),
        ({"dataset": "imagenet"}, "'imagenet' has no entry in classification.datasets"),
    ],
)
def test_bad_table_fails_before_any_job(workdir, tmp_path, row, message):
    """A table file with one bad row: the error names the table, the row and the key."""
    bad = tmp_path / "tables"
    bad.mkdir()
    row = {k: v for k, v in {**GOOD_ROW, **row}.items() if v is not None}
    table = {"paper": "rskip", "caption": "c", "source": "s", "task": "classification", "metric": "test_error", "rows": [row]}
    (bad / "t.yaml").write_text(yaml.safe_dump({"bad-t1": table}))
    proc = snakemake(workdir, "-n", "--configfile", "tiny.yaml", "--config", f"tables_dir={bad}", "tables=all", check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and message in text and "bad-t1" in text, text[-2000:]
    assert "Job stats" not in text


def test_paper_scale_dry_run_lists_every_job(workdir):
    cfg = yaml.safe_load((workdir / "config" / "paper.yaml").read_text())
    plan = experiments.make_plan(cfg | {"tables_dir": str(workdir / "config" / "tables")})
    jobs = planned_jobs(workdir, "--configfile", "config/paper.yaml")
    n_mt = sum(run.task == "translation" for run in plan.runs.values())
    n_cap = sum(run.task == "captioning" for run in plan.runs.values())
    n_measured = len({(name, run) for run, name, _, _ in experiments.measured(plan)})  # one job per run and measurement
    tabled = {run for row in plan.rows for run in row["runs"]}
    only_figures = {run for m in plan.measures for run in m["runs"]} - tabled
    # paper 003's three nets of its own on CIFAR-10 and CIFAR-100 and Figure 9's ablation of
    # sharing, one seed each, under its own recipes (with the snapshots its figures over training
    # read); its ResNet-110 and UBN nets are Table 1's runs; every other figure reads the tables' runs
    expected = [(arch, f"{recipe}+iter-snapshots", 0) for arch, recipe in (("single_rep_resnet_paper", "iter-single"),
                                                                           ("avgpool_resnet_paper", "iter-pool"), ("wide_resnet_paper", "iter-wide")) for _ in range(2)]
    expected += [(f"shared_resnet_{s}_110", "iter-resnet110+iter-shared+iter-snapshots+iter-init", 0) for s in ("naive", "stats", "stats_gamma")]
    # paper 002: Figure 9 repeats Table 1's depth-32 and -44 nets "10 times each" (seeds 5-9 of its
    # own), and its fully fledged ResNet-20 pair trains one seed for Figure 12 (b) and the cushions
    expected += [(f"simple_net{d}", "noise", seed) for d in (32, 44) for _ in ("plain", "add") for seed in range(5, 10)]
    expected += [("resnet_cifar20", "noise+noise-fully-fledged", 0)] * 2
    assert sorted((plan.runs[r].arch_dir, plan.runs[r].recipe, plan.runs[r].seed) for r in only_figures) == sorted(expected)
    # paper 001: 6 cells on EN-VI base, 2 two-block, 2 on each other dataset x size; SAS: 2 on
    # each dataset x size. Each paper's protocol differs (refine:), so no cell is shared; 5 seeds.
    assert n_mt == (6 + 2 + 2 * 5 + 2 * 6) * 5
    assert n_cap == 2 * 5  # SAS Table 5: the captioner's baseline and + Proposal, 5 seeds (one cell per model, 8 metrics each)
    # a CIFAR cell's seeds 4 to a job (side by side on its GPU); each Transformer run its own job, on its own GPUs
    by_cell: dict[str, int] = {}
    for run in plan.runs.values():
        by_cell[run.cell_path] = by_cell.get(run.cell_path, 0) + (run.task == "classification")
    n_cls_jobs = sum(-(-n // 4) for n in by_cell.values())
    assert n_cls_jobs < len(plan.runs) - n_mt - n_cap and all(len(runs) <= 4 for runs in plan.jobs.values())
    assert jobs == {"download_cifar": 2, "prepare_cifar": 2, "train_classifier": n_cls_jobs,
                    "fetch_translation": 3, "prepare_translation": 3, "train_translator": n_mt,
                    "evaluate_translation": n_mt, "fetch_coco": 1, "fetch_backbone": 1, "prepare_coco": 1, "train_captioner": n_cap,
                    "evaluate_captioning": n_cap, "measure": n_measured, "gpu_hours": 1, "checks": 1, **AFTER_PLAN}


def test_the_gpu_day_scale_runs_every_table_on_one_gpu_per_job(workdir):
    """config/gpu-day.yaml: the paper scale's jobs at 2 seeds, every one on a single GPU (WMT keeps
    the papers' batch by accumulation instead of 4 GPUs)."""
    cfg = yaml.safe_load((workdir / "config" / "gpu-day.yaml").read_text())
    plan = experiments.make_plan(cfg | {"tables_dir": str(workdir / "config" / "tables")})
    paper = experiments.make_plan(yaml.safe_load((workdir / "config" / "paper.yaml").read_text())
                                  | {"tables_dir": str(workdir / "config" / "tables")})
    assert [(r["table"], r["label"]) for r in plan.rows] == [(r["table"], r["label"]) for r in paper.rows]
    assert {len(row["runs"]) for row in plan.rows} == {2}  # every table row at 2 seeds
    tabled = {run for row in plan.rows for run in row["runs"]}
    assert len(tabled) == 2 * len({run.rsplit("/seed", 1)[0] for run in tabled})  # seeds 0 and 1 of each cell
    assert set(plan.tables) == set(paper.tables)
    assert {experiments.gpus_for(cfg, run) for run in plan.runs.values()} == {1}
    wmt = [json.loads(run.recipe_json) for run in plan.runs.values() if run.dataset.startswith("wmt")]
    assert wmt and {(r["max_tokens"] * r["update_freq"]) for r in wmt} == {25_000, 16_384}
    jobs = planned_jobs(workdir, "--configfile", "config/gpu-day.yaml")
    assert jobs["train_classifier"] + jobs["train_translator"] + jobs["train_captioner"] == len(plan.jobs) and jobs["gpu_hours"] == 1
    # a CIFAR cell's 2 seeds train side by side in one job; each Transformer run its own job
    assert {len(runs) for job, runs in plan.jobs.items() if job.startswith("classification/")} == {1, 2}
    assert {len(runs) for job, runs in plan.jobs.items() if not job.startswith("classification/")} == {1}


def test_lint_is_clean(workdir):
    proc = snakemake(workdir, "--lint", check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_cifar_rules_prepare_an_archive_in_the_real_format(workdir, cifar10_archive):
    """With the archive in resources/ (as a finished download leaves it), prepare_cifar turns it
    into the prepared format; the download rule is not rerun."""
    (workdir / "resources").mkdir(exist_ok=True)
    shutil.copy(cifar10_archive, workdir / "resources" / "cifar10-python.tar.gz")
    snakemake(workdir, "results/data/cifar10.pt", "--cores", "1", "--configfile", "config/paper.yaml")
    import torch

    data = torch.load(workdir / "results" / "data" / "cifar10.pt", weights_only=True)
    assert data["train_x"].shape == (20, 3, 32, 32) and data["test_x"].shape == (4, 3, 32, 32)


def test_download_rule_rejects_a_file_with_the_wrong_checksum(workdir, cifar100_archive):
    """A mirror serving a different file: the job fails, names the file, and leaves nothing."""
    target = "resources/cifar100-python.tar.gz"
    proc = snakemake(workdir, target, "--cores", "1", "--configfile", "config/paper.yaml",
                     "--config", f"download_urls={{cifar100: 'file://{cifar100_archive}'}}", check=False)
    assert proc.returncode != 0
    log = (workdir / "logs" / "data" / "download_cifar100.log").read_text()
    assert "ChecksumError" in log and target in log and "eb9058c3a382ffc7106e4002c42a8d85" in log
    assert not (workdir / target).exists()


DOWNLOADS = {"resources/cifar10-python.tar.gz": "download", "resources/iwslt15_en_vi/fetched.json": "fetch-translation",
             "resources/mscoco/fetched.json": "fetch-coco", "resources/backbones/resnet101.IMAGENET1K_V2.pth": "fetch-backbone"}


@pytest.mark.parametrize("with_mirror", [False, True])
def test_every_download_command_parses_with_or_without_a_mirror(tmp_path, monkeypatch, with_mirror):
    """The commands of the download rules, as a paper-scale dry run prints them, are ones the CLI
    accepts: with no mirror configured the option gets an empty value instead of none."""
    from resrepro import cli

    for item in COPIED:
        (shutil.copytree if (REPO / item).is_dir() else shutil.copy)(REPO / item, tmp_path / item)
    mirror = str(tmp_path) if with_mirror else ""  # an existing folder: a mirror the config accepts
    keys = ("cifar10", "iwslt15_en_vi", "mscoco", "resnet101")
    config = ["--config", "download_urls={" + ", ".join(f"{key}: {mirror}" for key in keys) + "}"] if mirror else []
    out = snakemake(tmp_path, *DOWNLOADS, "-n", "-p", "--configfile", "config/paper.yaml", *config)
    commands = [line.removeprefix("Shell command: ").split(" 2> ")[0] for line in (out.stdout + out.stderr).splitlines()
                if line.startswith("Shell command: resrepro")]
    parsed = []
    for command in DOWNLOADS.values():
        monkeypatch.setitem(cli.COMMANDS, command, cli.COMMANDS[command]._replace(run=parsed.append))
    for command in commands:
        cli.main(shlex.split(command)[1:])
    assert sorted(a.command for a in parsed) == ["download", "fetch-backbone", "fetch-coco", "fetch-translation"]
    assert [a.url if a.command == "download" else a.mirror for a in parsed] == [mirror] * 4


def test_beyond_the_papers_and_a_residual_from_outside_the_package_run_end_to_end(workdir):
    """Issue 16 through Snakemake: the opt-in table beyond-t1 and a variant registered from a file
    outside src/ (the README's example), added to every selected table by `extra_rows`, all given
    on the command line; in a scale of their own, so the tiny report is left as it is."""
    module = REPO / "examples" / "residuals" / "gated_add.py"
    snakemake(workdir, "--cores", "2", "--configfile", "tiny.yaml", "--config", "scale=tiny-beyond", "tables=[beyond-t1, beyond-t3, rskip-t3]",
              "extra_rows=[{variant: gated_add, args: {logit: 0}}]", f"variant_modules=[{module}]")
    rows = pd.read_csv(workdir / "results" / "tiny-beyond" / "aggregate" / "rows.csv")
    beyond = rows[rows["table"] == "beyond-t1"]
    assert len(beyond) == 11 and beyond["new"].all() and beyond["paper"].isna().all()  # 10 rows and the extra one
    assert set(beyond["variant_id"]) >= {"pre_ln", "rezero", "skipinit", "layerscale", "deepnorm", "admin", "gated_add-logit0"}
    assert beyond["n"].eq(1).all() and set(beyond["verdict"]) == {"baseline", "inconclusive"}  # one seed: nothing to test
    extra = rows[(rows["table"] == "rskip-t3") & (rows["label"] == "+ gated_add-logit0")].iloc[0]
    assert bool(extra["new"]) and extra["baseline"] == "x + F" and extra["n"] == 1
    assert not rows[(rows["table"] == "rskip-t3") & (rows["label"] != "+ gated_add-logit0")]["new"].any()
    html = (workdir / "report" / "tiny-beyond" / "index.html").read_text()
    assert "Beyond the papers" in html and ">new<" in html and "+ gated_add-logit0" in html and "loop time vs baseline" in html
    depth = rows[rows["table"] == "beyond-t3"]
    assert len(depth) == 16 and depth["layers"].notna().all() and "gated_add-logit0" in set(depth["series"])  # 15 and the extra row
    assert (workdir / "report" / "tiny-beyond" / "figures" / "beyond-t3.png").stat().st_size > 0  # BLEU against depth
    assert planned_jobs(workdir, "--configfile", "tiny.yaml") == {}  # the tiny scale's own run is untouched


def test_a_failed_run_is_listed_in_a_partial_report_and_a_rerun_completes(tmp_path):
    """One run fails for real (its checkpoint is corrupt); with keep-going the other runs finish,
    `--config partial=true` renders a report that lists the failure, and after the fault is
    removed a plain rerun retrains only that run and gives the complete report. Then a recipe
    that diverges: a result, not a failure, so the pipeline still reaches the report."""
    root = tmp_path / "wf"
    root.mkdir()
    for item in COPIED:
        src = REPO / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / item)
    config = yaml.safe_load((REPO / "tests" / "configs" / "tiny.yaml").read_text()) | {"tables": ["sas-fn1"], "figures": []}
    (root / "fn1.yaml").write_text(yaml.safe_dump(config))
    bad_run = root / "results" / "tiny" / "classification" / "digits" / "preact_resnet8" / "default" / "sas-gammafree" / "seed0"
    (bad_run / "checkpoints").mkdir(parents=True)
    (bad_run / "checkpoints" / "last.pt").write_bytes(b"not a checkpoint")

    first = snakemake(root, "--cores", "2", "--configfile", "fn1.yaml", check=False)
    text = first.stdout + first.stderr
    assert first.returncode != 0 and "--config partial=true" in text  # the onerror hint
    assert (bad_run.parent / "seed0" / "failed.json").exists()
    assert (root / "results/tiny/classification/digits/preact_resnet8/default/sas/seed0/metrics.json").exists()  # kept going
    assert not (root / "report" / "tiny" / "index.html").exists()

    snakemake(root, "--cores", "2", "--configfile", "fn1.yaml", "--config", "partial=true")
    html = (root / "report" / "tiny" / "index.html").read_text()
    assert 'id="partial"' in html and 'id="unfinished"' in html
    assert "sas-gammafree/seed0" in html and "is unreadable" in html and "last.pt" in html
    runs = (root / "results" / "tiny" / "aggregate" / "runs.csv").read_text()
    assert ",failed," in runs and ",ok," in runs

    (bad_run / "checkpoints" / "last.pt").unlink()
    assert planned_jobs(root, "--configfile", "fn1.yaml") == {"train_classifier": 1, **AFTER_AGGREGATE}
    snakemake(root, "--cores", "2", "--configfile", "fn1.yaml")
    html = (root / "report" / "tiny" / "index.html").read_text()
    assert 'id="partial"' not in html and 'id="unfinished"' not in html
    assert not (bad_run / "failed.json").exists()

    # A divergent cell is a result, not a failure: the run goes through to the report.
    (root / "diverge.yaml").write_text(yaml.safe_dump(config | {"classification": config["classification"] | {"lr": 1.0e6}}))
    snakemake(root, "--cores", "2", "--configfile", "diverge.yaml")
    runs = (root / "results" / "tiny" / "aggregate" / "runs.csv").read_text()
    assert runs.count(",diverged,") == 2
    html = (root / "report" / "tiny" / "index.html").read_text()
    assert 'id="partial"' not in html
    for label in ("free gamma", "tied gamma = (1-a)(1-b)"):
        cells = row_by_label(html, "sas-fn1", label)
        assert (cells["reproduced"], cells["n"], cells["per seed"]) == ("diverged", "0/1 (1 diverged)", "diverged")
