"""Experiments as data: the papers' tables (config/tables/*.yaml) x a scale profile -> the runs.

A table row names a cell as the paper describes it (dataset, depth, variant, args); the scale
profile maps the paper's dataset and depth to what that scale runs, and its recipes (recipes.py)
say how each cell is trained and evaluated. One run is one cell, recipe and seed; rows that name
the same cell under the same recipe share its runs. Everything here is checked when Snakemake
parses the workflow, so a bad config fails before any job starts, naming the key.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from . import catalog, layout, recipes, schemas, specs
from .catalog import ConfigError
from .data import backbones

TASKS = ("classification", "translation", "captioning")
# The tables beyond the papers (config/tables/beyond.yaml, issue 16): their rows have no paper value
# (the report says "new") and their verdicts say better or worse than the baseline. Opt-in: `tables:
# all` leaves them out unless the scale sets `beyond: true`; naming them in `tables` selects them too.
BEYOND = "beyond"
REHEARSAL = "rehearsal"  # config/rehearsal.yaml's scale: its numbers mean nothing, so its averages are not checked
# metric -> higher is better; train_loss: the last (or best) epoch's mean cross-entropy over its
# batches; the COCO toolkit's metrics x 100 (evaluate/captioning.py)
CAPTION_METRICS = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider", "spice")
METRICS = {"test_error": False, "test_accuracy": True, "bleu": True, "train_loss": False, **{m: True for m in CAPTION_METRICS}}
# The version of the aggregate's tidy tables (analysis/aggregate.py): a parameter of the aggregate
# rule, so that a release that adds or changes their columns rewrites them, without retraining.
TIDY_FORMAT = 7
CELL_KEYS = {"label", "dataset", "arch", "depth", "size", "variant", "args"}
COMPUTED_CELL_KEYS = {"label", "curve"}  # a computed figure's cell: one of the curves its measurement computes
# download_urls keys: the datasets a rule downloads (workflow/rules/data.smk); the captioning
# backbone's weights are one more, under the backbone's name (rule fetch_backbone)
DOWNLOADED = ("cifar10", "cifar100", "iwslt15_en_vi", "wmt14_en_de", "wmt14_en_fr", "mscoco")
URL_SCHEMES = ("http", "https", "ftp", "file")


def table_files(tables_dir: str | Path) -> list[Path]:
    files = sorted(Path(tables_dir).glob("*.yaml"))
    if not files:
        raise ConfigError(f"tables_dir: no *.yaml tables in {tables_dir!s}")
    return files


def load_tables(source: str | Path | list) -> dict[str, dict]:
    """All tables of all papers (a folder of YAML files, or a list of them), by id, in file order;
    each checked for shape and variants."""
    tables: dict[str, dict] = {}
    files = [Path(f) for f in source] if isinstance(source, (list, tuple)) else table_files(source)
    for path in files:
        for table_id, table in (yaml.safe_load(path.read_text()) or {}).items():
            if table_id in tables:
                raise ConfigError(f"{path}: table {table_id!r} is defined twice")
            tables[table_id] = _check_table(table_id, table, path)
    return tables


def _check_table(table_id: str, table: dict, path: Path) -> dict:
    """A table's shape (workflow/schemas/tables.schema.yaml), then what refers elsewhere: its rows'
    architectures and variants, baselines, metrics and measured quantities."""
    where = f"{path}: {table_id}"
    schemas.check(table, "tables", where)
    if "measurement" in table:
        table = {**table, "settings": _check_table_measurement(table, where)}
    _check_references(table, where)
    _check_plot(table, where)
    labels = [row.get("label") for row in table["rows"]]
    new = table["paper"] == BEYOND
    for i, row in enumerate(table["rows"]):
        rwhere = f"{where}.rows[{i}]"
        if new:  # no paper reports these rows
            if "paper" in row or "quantity" in row:
                raise ConfigError(f"{rwhere}: a table beyond the papers has no paper values or measured rows; drop 'paper'/'quantity'")
            row = table["rows"][i] = {**row, "paper": None}
        _check_cell(table["task"], row, rwhere, ("paper",))
        if not new:
            _check_measured_row(table, row, rwhere)
        if "paper_train_error" in row and table["task"] != "classification":
            raise ConfigError(f"{rwhere}: paper_train_error is a classifier's; this table's task is {table['task']}")
        if row.get("claim") == "same" and row.get("baseline", table.get("baseline")) is None:
            raise ConfigError(f"{rwhere}: claim=same compares the row with its baseline: name one")
        if "quantity" not in row and row_metric(table, row) not in METRICS:
            raise ConfigError(f"{rwhere}: metric={row_metric(table, row)!r} unknown; allowed: {', '.join(METRICS)}")
        baseline = row.get("baseline", table.get("baseline"))
        if baseline is not None and baseline not in labels:
            raise ConfigError(f"{rwhere}: baseline {baseline!r} is not a row label; rows: {labels}")
        if baseline is not None and row_metric(table, table["rows"][labels.index(baseline)]) != row_metric(table, row):
            raise ConfigError(f"{rwhere}: its metric is {row_metric(table, row)}, its baseline {baseline!r}'s is "
                              f"{row_metric(table, table['rows'][labels.index(baseline)])}: a verdict compares one metric")
    return table


def _check_plot(table: dict, where: str) -> None:
    """plot: layers needs every row's `series` (a name) and `layers` (a positive whole number)."""
    if "plot" not in table:
        return
    for i, row in enumerate(table["rows"]):
        layers = row.get("layers")
        if "series" not in row or layers is None:
            raise ConfigError(f"{where}.rows[{i}]: plot: layers needs a series (a name) and layers (a whole number > 0); "
                              f"got series={row.get('series')!r}, layers={layers!r}")


def _check_references(table: dict, where: str) -> None:
    """Each reference row: a label, its source, and the paper's value (or null: "-" in the paper)
    for metrics that the table's rows report."""
    row_metrics = {row_metric(table, row) for row in table["rows"]}
    for i, ref in enumerate(table.get("references", [])):
        for metric in ref["paper"]:
            if metric not in row_metrics:
                raise ConfigError(f"{where}.references[{i}].paper: {metric!r} is not a metric of this table's rows: {sorted(row_metrics)}")


def _check_table_measurement(table: dict, where: str) -> dict:
    """A table whose rows a measurement computes: the measurement reads runs of the table's task;
    its settings (the measurement's defaults under the table's own)."""
    try:
        spec = catalog.measurement(table["measurement"])
    except ConfigError as err:
        raise ConfigError(f"{where}.measurement: {err}") from None
    if spec.task != table["task"]:
        raise ConfigError(f"{where}.measurement: {spec.name} measures {spec.task} runs; the table's task is {table['task']}")
    return catalog.settings_for(spec.name, table.get("settings"), f"{where}.settings")


def _check_measured_row(table: dict, row: dict, where: str) -> None:
    """A measured row names one of its table's measurement's quantities and a snapshot (`at`); a
    row may leave the paper's value out (null) only where its note says why."""
    if row["paper"] is None and not row.get("note"):
        raise ConfigError(f"{where}: paper is null: say in its note why the paper's value is missing")
    if "quantity" not in row and "at" not in row:
        if "metric" not in row and "metric" not in table:
            raise ConfigError(f"{where}: missing key 'metric' (or 'quantity' of the table's measurement)")
        return
    if "measurement" not in table:
        raise ConfigError(f"{where}: quantity/at read a measurement: the table names none (key 'measurement')")
    declared = catalog.measurement(table["measurement"]).quantities
    if row.get("quantity") not in declared:
        raise ConfigError(f"{where}: quantity={row.get('quantity')!r} is not one of {table['measurement']}'s: {', '.join(declared)}")
    if "metric" in row:
        raise ConfigError(f"{where}: a measured row's metric is its quantity; drop 'metric'")


def row_metric(table: dict, row: Mapping | specs.TableRow) -> str:
    """A row's metric: its measured quantity, else its own metric, else its table's."""
    return row.get("quantity") or row.get("metric", table.get("metric"))


def higher_is_better(table: dict, row: Mapping | specs.TableRow) -> bool | None:
    """Whether a larger value of the row's metric is better; None for a measured quantity, which
    is larger or smaller, not better or worse."""
    return None if row.get("quantity") else METRICS[row_metric(table, row)]


def _check_cell(task: str, cell: dict, where: str, also_required: tuple[str, ...] = (), allowed: set[str] | None = None) -> None:
    """A table row or a figure cell: its keys (a row's others: the table schema's; a cell's:
    `allowed`), its architecture (of its task) and its size key, and its variant."""
    arch = architecture_of(task, cell, where)
    for key in ("label", "dataset", arch.size_key, "variant", *also_required):
        if key not in cell:
            raise ConfigError(f"{where}: missing key {key!r}")
    if allowed is not None and (unknown := set(cell) - allowed):
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r}; allowed: {sorted(allowed)}")
    catalog.validate(cell["variant"], cell.get("args"), where=f"{where}.args")
    catalog.check_placed(cell["variant"], arch, where)


def architecture_of(task: str, row: dict, where: str) -> catalog.Architecture:
    name = row.get("arch", catalog.DEFAULT_FOR_TASK[task])
    try:
        return catalog.architecture(name, task)
    except ConfigError as err:
        raise ConfigError(f"{where}.arch: {err}") from None


def load_figures(source: str | Path | list | None) -> dict[str, dict]:
    """The papers' figures (a folder of YAML files, config/figures, or a list of them; None: no
    figures) by id, each checked: its measurement is registered, its settings are the
    measurement's, its cells are cells of the measurement's task."""
    figures: dict[str, dict] = {}
    if source is None:
        paths = []
    else:
        paths = [Path(f) for f in source] if isinstance(source, (list, tuple)) else sorted(Path(source).glob("*.yaml"))
    for path in paths:
        for figure_id, figure in (yaml.safe_load(path.read_text()) or {}).items():
            where = f"{path}: {figure_id}"
            if figure_id in figures:
                raise ConfigError(f"{path}: figure {figure_id!r} is defined twice")
            schemas.check(figure, "figures", where)
            if "not_reproduced" in figure:  # a figure this pipeline cannot draw: the report says why
                figures[figure_id] = {**figure, "task": None, "settings": {}, "cells": []}
                continue
            try:
                task = catalog.measurement(figure["measurement"]).task
            except ConfigError as err:
                raise ConfigError(f"{where}.measurement: {err}") from None
            settings = catalog.settings_for(figure["measurement"], figure.get("settings"), f"{where}.settings")
            _check_quantities(figure, where)
            _check_differences(figure, where)
            _check_checks(figure, where)
            for i, cell in enumerate(figure["cells"]):
                if task is None:  # computed: its cells name curves, not trained nets
                    if set(cell) != COMPUTED_CELL_KEYS:
                        raise ConfigError(f"{where}.cells[{i}]: a computed figure's cell has the keys {sorted(COMPUTED_CELL_KEYS)}; got {cell!r}")
                else:
                    _check_cell(task, cell, f"{where}.cells[{i}]", (), CELL_KEYS)
            figures[figure_id] = {**figure, "task": task, "settings": settings}
    return figures


def _check_checks(figure: dict, where: str) -> None:
    """`checks:` test parts of the claim on the figure's data (analysis/figure_checks.py)."""
    from .analysis.figure_checks import TESTS, check_keys

    checks = figure.get("checks", [])
    labels = [c.get("label") for c in figure["cells"]] + [d["label"] for d in figure.get("differences", [])]
    for i, check in enumerate(checks):
        cwhere = f"{where}.checks[{i}]"
        if check["test"] not in TESTS:
            raise ConfigError(f"{cwhere}: test={check['test']!r} unknown; allowed: {', '.join(TESTS)}")
        required, allowed = check_keys(check)
        if missing := required - set(check):
            raise ConfigError(f"{cwhere}: missing key {sorted(missing)[0]!r} (test {check['test']})")
        if unknown := set(check) - allowed:
            raise ConfigError(f"{cwhere}: unknown key {sorted(unknown)[0]!r}; allowed for test {check['test']}: {sorted(allowed)}")
        if stray := [c for c in check.get("cells") or [] if c not in labels]:
            raise ConfigError(f"{cwhere}.cells: {stray[0]!r} is not a cell of this figure; cells: {labels}")


def _check_differences(figure: dict, where: str) -> None:
    """`differences:` draws (and checks) per seed one cell's curve minus another's instead of the
    cells themselves (analysis/judgement.figure_differences)."""
    differences = figure.get("differences", [])
    labels = [c.get("label") for c in figure["cells"]]
    for i, difference in enumerate(differences):
        dwhere = f"{where}.differences[{i}]"
        if stray := [difference[k] for k in ("of", "minus") if difference[k] not in labels]:
            raise ConfigError(f"{dwhere}: {stray[0]!r} is not a cell of this figure; cells: {labels}")
        if difference["label"] in labels or difference["label"] in [d["label"] for d in differences[:i]]:
            raise ConfigError(f"{dwhere}.label: {difference['label']!r} names a cell or another difference already")


def _check_quantities(figure: dict, where: str) -> None:
    """`quantities:` draws some of what its measurement writes (all when absent)."""
    if "quantities" not in figure:
        return
    declared = catalog.measurement(figure["measurement"]).quantities
    wanted = figure["quantities"]
    if not declared:
        raise ConfigError(f"{where}.quantities: {figure['measurement']} writes no named quantities to choose from")
    if any(q not in declared for q in wanted):
        raise ConfigError(f"{where}.quantities: expected a list of {figure['measurement']}'s quantities: {', '.join(declared)}; got {wanted!r}")


@dataclass(frozen=True)
class Run:
    """One training job: a cell at this scale and a seed."""

    task: str
    dataset: str  # the dataset this scale runs (e.g. digits for the paper's cifar10 at mini)
    arch_dir: str  # the architecture's folder at this scale's size, e.g. preact_resnet32 (written "arch": plan.json, runs.csv)
    model: str  # the architecture (catalog.ARCHITECTURES), e.g. preact_resnet
    size: int | str  # the size this scale runs, under the architecture's size key: depth 32, size "base"
    variant: str
    args_json: str  # the variant's full args, JSON with sorted keys (hashable, deterministic)
    seed: int
    recipe: str = recipes.DEFAULT  # the refinements applied (recipes.resolve), a folder name
    recipe_json: str = "{}"  # the resolved recipe, JSON with sorted keys

    @property
    def variant_id(self) -> str:
        return catalog.variant_id(self.variant, json.loads(self.args_json))

    @property
    def cell_path(self) -> str:
        """The cell's folder, relative to results/<scale>/: its runs are seed<N>/ inside it."""
        return layout.cell_path(self.task, self.dataset, self.arch_dir, self.recipe, self.variant_id)

    @property
    def path(self) -> str:
        """Relative to results/<scale>/: the stable layout people script against."""
        return layout.run_path(self.cell_path, self.seed)

    def plan_entry(self) -> dict:
        """The run in plan.json: its fields, the folder under the key "arch" as the layout names it."""
        entry = asdict(self)
        entry["arch"] = entry.pop("arch_dir")
        return entry


@dataclass
class Plan:
    scale: str
    tables: dict[str, dict]  # the selected tables, by id
    figures: dict[str, dict] = field(default_factory=dict)  # the selected figures, by id
    runs: dict[str, Run] = field(default_factory=dict)  # by Run.path
    rows: list[dict] = field(default_factory=list)  # one per table row: which runs it averages
    measures: list[dict] = field(default_factory=list)  # one per figure cell: its measurement of which runs
    jobs: dict[str, list[str]] = field(default_factory=dict)  # job path -> the runs it trains, one after another
    all_tables: dict[str, dict] = field(default_factory=dict)  # every table of tables_dir, selected or not
    all_figures: dict[str, dict] = field(default_factory=dict)  # every figure of figures_dir
    claims: dict = field(default_factory=dict)  # config/claims.yaml as written (its references checked)

    def job_of(self, run_path: str) -> str:
        return next(job for job, runs in self.jobs.items() if run_path in runs)

    def datasets(self) -> list[str]:
        return sorted({r.dataset for r in self.runs.values()})


def resolved_plan(plan: Plan, config: dict) -> dict:
    """The plan as the analysis and the report read it, decided once when the workflow is parsed:
    every table and figure (the report shows the ones not run too), the claims as written (config
    `claims`; the judge resolves their references), each table row and figure cell with its runs,
    every run's parts and each job's runs. Plain JSON: no YAML to read again. Written as two files
    (PLAN_FILES), so that editing a claim or a figure's check judges again without aggregating again."""
    return plan_document(plan.scale, plan.all_tables, plan.all_figures, plan.claims, plan.rows, plan.measures,
                         {path: run.plan_entry() for path, run in plan.runs.items()}, plan.jobs, claims_source=config.get("claims") or "")


# The resolved plan's files and their keys: what the aggregate reads (results/<scale>/plan.json),
# and what only the judge and the report read (checks.json: the figures' checks and the claims).
PLAN_FILES = {"plan": ("scale", "tables", "rows", "measures", "runs", "jobs"), "checks": ("figures", "claims", "claims_source")}


def plan_part(document: dict, name: str) -> dict:
    """The keys of a resolved plan that its file `name` (PLAN_FILES) holds."""
    return {key: document[key] for key in PLAN_FILES[name]}


def read_plan(*paths: str | Path) -> dict:
    """A resolved plan from its files (or one file holding every part, as tests write it)."""
    out: dict = {}
    for path in paths:
        out |= json.loads(Path(path).read_text())
    return out


def plan_document(scale: str, tables: dict, figures: dict, claims: str | Path | dict | None, rows: list[dict], measures: list[dict],
                  runs: dict | None = None, jobs: dict | None = None, claims_source: str | Path = "") -> dict:
    """A resolved plan's JSON document from its parts (`resolved_plan`; tests build one from a few
    tables). `claims`: config/claims.yaml's path, or what it holds with `claims_source` naming it."""
    if not isinstance(claims, dict):
        claims, claims_source = (yaml.safe_load(Path(claims).read_text()) or {}) if claims else {}, claims or ""
    return {"scale": scale, "tables": tables, "figures": figures, "claims": claims, "claims_source": str(claims_source),
            "rows": rows, "measures": measures, "runs": runs or {}, "jobs": jobs or {}}


def seeds_for(config: dict, table_id: str, task: str) -> list[int]:
    """Seeds 0..n-1, n from the table's (or figure's) own entry in `table_seeds`, else its task's,
    else the top-level `seeds`."""
    n = config.get("table_seeds", {}).get(table_id, config[task].get("seeds", config["seeds"]))
    return list(range(n))


def make_plan(config: dict) -> Plan:
    check_download_urls(config)
    check_download_md5(config)
    check_download_mirrors(config)
    all_tables = load_tables(config["tables_dir"])
    beyond = config.get("beyond", False)
    selected = [t for t, table in all_tables.items() if beyond or table["paper"] != BEYOND] if config["tables"] == "all" else config["tables"]
    for table_id in selected:
        if table_id not in all_tables:
            raise ConfigError(f"tables: unknown table {table_id!r}; allowed: all, {', '.join(all_tables)}")
    for dataset in config["translation"].get("gpus", {}):
        if dataset not in config["translation"]["datasets"].values():
            raise ConfigError(f"translation.gpus: {dataset!r} is not a dataset this scale runs; "
                              f"it runs: {sorted(set(config['translation']['datasets'].values()))}")
    for depth in config["classification"]["depths"].values():
        if (depth - 2) % 6:
            raise ConfigError(f"classification.depths: {depth} is not a PreAct-ResNet depth; it must be 6n+2 (8, 14, 20, ..., 110)")
    all_figures = load_figures(config.get("figures_dir"))
    for entry_id in config.get("table_seeds", {}):
        if entry_id not in all_tables and entry_id not in all_figures:
            raise ConfigError(f"table_seeds: unknown table or figure {entry_id!r}; allowed: {', '.join([*all_tables, *all_figures])}")
    chosen = config.get("figures", "all")
    for figure_id in [] if chosen == "all" else chosen:
        if figure_id not in all_figures:
            raise ConfigError(f"figures: unknown figure {figure_id!r}; allowed: all, {', '.join(all_figures) or '(none)'}")
    # all: the figures of the papers whose tables are selected (tables=[rskip-t1] trains no SAS net);
    # with every table selected, every paper's figures, those of a paper without tables included
    papers = {all_tables[t]["paper"] for t in selected}
    if config["tables"] == "all":
        papers |= {f["paper"] for f in all_figures.values()}
    figures = {f: e for f, e in all_figures.items() if e["paper"] in papers} if chosen == "all" else {f: all_figures[f] for f in chosen}
    plan = Plan(config["scale"], {t: all_tables[t] for t in selected}, figures, all_tables=all_tables, all_figures=all_figures)
    for task in sorted({t["task"] for t in [*plan.tables.values(), *plan.figures.values()] if t["task"]}):
        recipes.check_refinements(task, config[task])
        recipes.check_at_paper_size(task, config[task])
    for table_id, table in plan.tables.items():
        for i, row in enumerate(table["rows"]):
            runs = _plan_cell(config, plan, table["task"], table["paper"], table_id, row, f"{table_id}.rows[{i}]", "table")
            plan.rows.append({"table": table_id, "row": i, "label": row["label"],
                              "baseline": row.get("baseline", table.get("baseline")), "runs": runs,
                              "model_keys": model_keys(plan.runs[runs[0]]),
                              **({"measurement": table["measurement"], "settings": table["settings"]} if "quantity" in row else {})})
        for k, entry in enumerate(config.get("extra_rows") or []):
            row = extra_row(table, entry, f"{table_id}: extra_rows[{k}]")
            if row is not None:
                runs = _plan_cell(config, plan, table["task"], table["paper"], table_id, row, f"{table_id} (extra_rows[{k}])", "table")
                plan.rows.append({"table": table_id, "row": len(table["rows"]) + k, "label": row["label"], "baseline": row["baseline"],
                                  "runs": runs, "spec": row, "model_keys": model_keys(plan.runs[runs[0]])})
    for figure_id, figure in plan.figures.items():
        for i, cell in enumerate(figure["cells"]):
            if figure["task"] is None:  # computed where the figures are aggregated: no run, no job
                plan.measures.append({"figure": figure_id, "cell": i, "label": cell["label"], "measurement": figure["measurement"],
                                      "settings": figure["settings"], "quantities": figure.get("quantities"), "runs": [], "curve": cell["curve"]})
                continue
            runs = _plan_cell(config, plan, figure["task"], figure["paper"], figure_id, cell, f"{figure_id}.cells[{i}]", "figure")
            plan.measures.append({"figure": figure_id, "cell": i, "label": cell["label"], "measurement": figure["measurement"],
                                  "settings": figure["settings"], "quantities": figure.get("quantities"), "runs": runs})
    _check_one_setting_per_measured_run(plan)
    _check_graph_replays(plan)
    if config.get("claims"):  # checked here, so that a claim citing a renamed row fails before any job
        from .analysis.claims import load_claims

        plan.claims = yaml.safe_load(Path(config["claims"]).read_text()) or {}
        load_claims(plan.claims, all_tables, all_figures, config["claims"])
    if config.get("seeds_stacked") and seeds_in_parallel(config, "classification") > 1:
        raise ConfigError(f"seeds_stacked trains a job's seeds as one program; seeds_in_parallel {seeds_in_parallel(config, 'classification')} "
                          "would start them as separate processes too: set one of the two for classification")
    plan.jobs = group_into_jobs(plan.runs, lambda task: seeds_per_job(config, task))
    return plan


def check_captioning_scorers(plan: Plan, java: str = "bundled") -> None:
    """The captioning evaluation scores with the COCO toolkit, whose METEOR and PTB tokenizer run
    on Java (the config's `java`, evaluate/java.py): refused where the workflow is parsed when
    either is missing, not after the captioners' GPU-hours of training. (Called by the workflow
    only: planning and costing need neither.)"""
    import importlib.util

    from .evaluate import java as java_runtime

    if not any(run.task == "captioning" for run in plan.runs.values()):
        return
    missing = [why for why in (java_runtime.problem(java),
                               None if importlib.util.find_spec("pycocoevalcap") else "the pycocoevalcap package is not installed") if why]
    if missing:
        raise ConfigError(f"the captioning tables are evaluated with pycocoevalcap, whose METEOR and PTB tokenizer run on Java: "
                          f"{'; '.join(missing)}. Leave the captioning tables out of `tables`, or, where the jobs run elsewhere "
                          f"with both, set check_scorers: false")


def downloaded_names(config: dict) -> list[str]:
    """What the download rules fetch, by the names download_urls and download_md5 use."""
    return [*DOWNLOADED, backbones.with_defaults(config.get("captioning", {}).get("features", {}).get("backbone"))["name"]]


def check_download_urls(config: dict) -> None:
    """Each download_urls entry names what a rule downloads and is a URL or an existing file or
    folder (downloads are local rules: they read a path where the workflow is parsed)."""
    allowed = downloaded_names(config)
    for key, location in config.get("download_urls", {}).items():
        if key not in allowed:
            raise ConfigError(f"download_urls.{key}: no rule downloads {key!r}; allowed: {', '.join(allowed)}")
        problem = location_problem(location)
        if problem:
            raise ConfigError(f"download_urls.{key}: {problem}")


def check_download_md5(config: dict) -> None:
    """Each download_md5 pin is keyed "<download>/<file name>", the download one that a rule does."""
    allowed = downloaded_names(config)
    for key in config.get("download_md5", {}):
        download, _, file_name = key.partition("/")
        if download not in allowed or not file_name:
            raise ConfigError(f"download_md5.{key}: expected <download>/<file name>, the download one of {', '.join(allowed)}")


def check_download_mirrors(config: dict) -> None:
    """Each download_mirrors entry is keyed "<download>/<file name>", a file one of the fetch rules
    gets (the translation datasets' and MSCOCO's), and lists URLs or existing paths."""
    from .data.coco import COCO_FILES
    from .data.translation import SOURCES

    files = {f"{name}/{f.name}" for name, source in SOURCES.items() for f in source.files} | {f"mscoco/{f.name}" for f in COCO_FILES}
    for key, locations in config.get("download_mirrors", {}).items():
        if key not in files:
            raise ConfigError(f"download_mirrors.{key}: not a file the fetch rules get; e.g. mscoco/caption_datasets.zip, "
                              "wmt14_en_de/training-parallel-commoncrawl.tgz")
        for location in locations:
            if problem := location_problem(location):
                raise ConfigError(f"download_mirrors.{key}: {problem}")


def download_mirrors(config: dict, download: str) -> dict[str, list[str]]:
    """The extra sources of one download's files, by file name (download_mirrors)."""
    prefix = f"{download}/"
    return {key.removeprefix(prefix): list(urls) for key, urls in config.get("download_mirrors", {}).items() if key.startswith(prefix)}


def download_md5(config: dict, download: str) -> dict[str, str]:
    """The md5 pins of one download's files, by file name."""
    prefix = f"{download}/"
    return {key.removeprefix(prefix): md5 for key, md5 in config.get("download_md5", {}).items() if key.startswith(prefix)}


def location_problem(location: str) -> str | None:
    """What is wrong with a mirror location, or None: a URL needs a host (file:// a path); a string
    without a scheme is taken as a path only if it exists, since a typo would look like one."""
    if not location:
        return "empty; give a URL or a file path, or leave the key out for the official source"
    parts = urllib.parse.urlsplit(location)
    if parts.scheme == "file":
        return None if parts.path else f"{location!r} names no file or folder"
    if parts.scheme in URL_SCHEMES:
        return None if parts.netloc else f"{location!r} names no host (expected {parts.scheme}://host/...)"
    if not parts.scheme and Path(location).exists():
        return None
    return (f"{location!r} is neither a URL ({', '.join(s + '://' for s in URL_SCHEMES)}) "
            "nor an existing file or folder")


def extra_row(table: dict, entry: dict, where: str) -> dict | None:
    """A row of `extra_rows` for this table: the variant (and args) on the cell of the table's
    baseline row (the first baseline that is not a measured quantity), judged against that baseline
    with no paper value (`new`). None where the table has no such baseline to stand on (a table of
    measured quantities), or where its architecture cannot build the variant (catalog.check_placed:
    e.g. Pre-LN in paper 002's simplified nets)."""
    by_label = {r["label"]: r for r in table["rows"]}
    labels = [table["baseline"]] if table.get("baseline") else [r["baseline"] for r in table["rows"] if "baseline" in r]
    label = next((b for b in labels if b in by_label and "quantity" not in by_label[b]), None)
    base = by_label.get(label)
    if base is None:
        return None
    if entry["variant"] in catalog.PLACED_VARIANTS and not architecture_of(table["task"], base, where).places_residuals:
        return None
    # from the command line (--config extra_rows='[{variant: v, args: {k: 0}}]') each arg is a string: read it as YAML
    given = {k: yaml.safe_load(v) if isinstance(v, str) else v for k, v in (entry.get("args") or {}).items()}
    args = catalog.validate(entry["variant"], given, where=where)
    row = {k: base[k] for k in ("dataset", "arch", "depth", "size", "metric") if k in base}
    name = catalog.variant_id(entry["variant"], args)
    label_of_row = entry.get("label") or f"+ {name}"
    if label_of_row in {r["label"] for r in table["rows"]}:  # rows are found by label: two would be one
        raise ConfigError(f"{where}: label {label_of_row!r} is already a row of this table; give the extra row another")
    if "plot" in table:  # the depth study: a line of its own, at the baseline's depth
        row.update(series=entry.get("label") or name, layers=base["layers"])
    return {**row, "label": label_of_row, "formula": entry.get("formula", ""), "variant": entry["variant"],
            "args": given, "paper": None, "new": True, "baseline": label,
            "note": "an extra row (extra_rows): no paper reports it"}


def per_task(config: dict, key: str, task: str):
    """A setting that is one value for every task or a mapping of tasks to values (a task it
    leaves out: 1), e.g. `seeds_per_job: {classification: 4}`."""
    value = config.get(key, 1)
    return value.get(task, 1) if isinstance(value, dict) else value


def seeds_per_job(config: dict, task: str) -> int | str:
    """How many seeds of a cell of `task` one job runs (config seeds_per_job; "all": every seed)."""
    return per_task(config, "seeds_per_job", task)


def seeds_in_parallel(config: dict, task: str) -> int:
    """How many of a `task` job's seeds may train side by side as processes (config seeds_in_parallel)."""
    return per_task(config, "seeds_in_parallel", task)


def group_into_jobs(runs: dict[str, Run], seeds_per_job: Callable[[str], int | str]) -> dict[str, list[str]]:
    """The training jobs: each trains `seeds_per_job(task)` seeds of one cell ("all": every seed)
    in one process, one after another (or side by side: seeds_in_parallel). A process pays its
    start-up once (torch and its optimizers import in about 5 s on a CPU, more than a mini run
    trains), and a cell's seeds share everything but the seed. One seed per job spreads them over
    GPUs and Slurm allocations.

    A job's path is its cell's folder and its seeds, `<cell>/seeds0-2` (or `seeds3` for one)."""
    by_cell: dict[str, list[Run]] = {}
    for run in runs.values():
        by_cell.setdefault(run.cell_path, []).append(run)
    jobs = {}
    for cell, cell_runs in by_cell.items():
        cell_runs.sort(key=lambda r: r.seed)
        per_job = seeds_per_job(cell_runs[0].task)
        size = len(cell_runs) if per_job == "all" else per_job
        for i in range(0, len(cell_runs), size):
            chunk = cell_runs[i : i + size]
            jobs[layout.job_path(cell, [r.seed for r in chunk])] = [r.path for r in chunk]
    return jobs


def _plan_cell(config: dict, plan: Plan, task: str, paper: str, table_id: str, row: dict, where: str, kind: str) -> list[str]:
    """The runs of one cell (a table row or a figure cell: `kind`) at this scale, added to the plan; their paths."""
    task_cfg = config[task]
    dataset = _lookup(task_cfg["datasets"], row["dataset"], f"{task}.datasets", where)
    arch = architecture_of(task, row, where)
    args = catalog.validate(row["variant"], row.get("args"), where=where)
    cell = {"paper": paper, "table": table_id, "kind": kind, "dataset": row["dataset"], "arch": arch.name, arch.size_key: row[arch.size_key],
            "variant": row["variant"]}
    size = _size_at_scale(task_cfg, task, arch, cell, where)
    recipe_name, recipe = recipes.resolve(task_cfg, cell)
    check_recipe(task, recipe, f"{where} (recipe {recipe_name})", averages_read=config["scale"] != REHEARSAL)
    runs = [
        Run(task, dataset, arch.run_name.format(size), arch.name, size, row["variant"], json.dumps(args, sort_keys=True),
            seed, recipe_name, json.dumps(recipe, sort_keys=True))
        for seed in seeds_for(config, table_id, task)
    ]
    for run in runs:  # the path names the recipe: a path already planned holds this same run
        plan.runs[run.path] = run
    return [run.path for run in runs]


def _size_at_scale(task_cfg: dict, task: str, arch: catalog.Architecture, cell: dict, where: str):
    """The depth or size a cell's model has at this scale: the paper's own where the task's
    `at_paper_size` matches the cell (config/paper.yaml's identity maps give the same), else what
    the scale's map of the paper's sizes (depths, sizes) says."""
    paper_size = cell[arch.size_key]
    if recipes.at_paper_size(task_cfg, cell):
        return paper_size
    map_key = arch.size_key + "s"
    return _lookup(task_cfg.get(map_key, {}), paper_size, f"{task}.{map_key}", where)


def measured(plan: Plan) -> list[tuple[str, str, dict, str]]:
    """(run, measurement, settings, who asks) for every measurement the plan's figures and
    measured table rows need: the measure jobs."""
    asks = [(m["runs"], m["measurement"], m["settings"], m["figure"]) for m in plan.measures]
    asks += [(r["runs"], r["measurement"], r["settings"], r["table"]) for r in plan.rows if "measurement" in r]
    return [(run, name, settings, who) for runs, name, settings, who in asks for run in runs]


def _check_one_setting_per_measured_run(plan: Plan) -> None:
    """A run's measurement is one file (measure/<name>.csv): two figures (or tables) may share it
    only with the same settings."""
    seen: dict[tuple[str, str], tuple[str, dict]] = {}
    for run, name, settings, who in measured(plan):
        first = seen.setdefault((run, name), (who, settings))
        if first[1] != settings:
            raise ConfigError(f"{who}: {name} of {run} with settings {settings}, but {first[0]} measures it with {first[1]}: make them equal")


def _check_graph_replays(plan: Plan) -> None:
    """A recipe that replays CUDA graphs (compile: cudagraphs, ...) names no architecture that
    trains otherwise as graphs (catalog: replays_graphs); `auto` leaves those eager."""
    for run_id, run in plan.runs.items():
        backend = json.loads(run.recipe_json).get("compile")
        if backend in recipes.GRAPH_REPLAYS and not catalog.architecture(run.model).replays_graphs:
            raise ConfigError(f"{run_id}: {run.task}.compile {backend!r} replays CUDA graphs, and {run.model} trained otherwise "
                              "as graphs than eagerly on a GPU (its blocks share weights): use compile auto or false")


def measure_settings(plan: Plan, run: str, measurement: str) -> dict:
    """The settings of a run's measurement (one per run and measurement: see make_plan)."""
    return next(settings for r, name, settings, _ in measured(plan) if name == measurement and r == run)


def _lookup(mapping: dict, key, map_name: str, where: str):
    # YAML gives int keys for depths; accept "110" too, so --config overrides work.
    for k, v in mapping.items():
        if str(k) == str(key):
            return v
    raise ConfigError(f"{where}: {key!r} has no entry in {map_name}; it maps: {sorted(map(str, mapping))}")


def gpus_for(config: dict, run: Run) -> int:
    """GPUs one run's training job holds: translation.gpus for its dataset, else gpus_per_job."""
    default = config.get("gpus_per_job", 0)
    if run.task == "translation":
        return config["translation"].get("gpus", {}).get(run.dataset, default)
    return default


# Training loops stop at a checkpoint before their job's time limit and resume in the next job.
CONTINUING_RULES = ("train_classifier", "train_translator", "train_captioner")


def seeds_at_once(config: dict, task: str, runs: int) -> int:
    """How many of a `task` training job's `runs` train side by side as processes
    (seeds_in_parallel, at most its runs)."""
    return min(seeds_in_parallel(config, task), runs)


def training_rounds(config: dict, task: str, runs: int) -> int:
    """How many times a training job of `runs` trains one after another, side by side as it may."""
    return -(-runs // seeds_at_once(config, task, runs))


def job_memory(config: dict, rule: str, at_once: int) -> int:
    """The memory (MB) a job of `rule` asks for: its memory per run (config `resources`) times the
    runs it trains at once, each its own process with its own copy of torch, CUDA and the data."""
    return config["resources"][rule]["mem_mb"] * at_once


def job_minutes(config: dict, rule: str, rounds: int = 1) -> int:
    """The runtime a job of `rule` asks for: its minutes per run (config `resources`) times the
    rounds its runs take one after another, at most max_job_minutes for a training job, which then
    continues in the next job. Any other job that would need longer is refused."""
    need, cap = config["resources"][rule]["runtime"] * rounds, config.get("max_job_minutes", 1440)
    if need <= cap:
        return need
    if rule in CONTINUING_RULES:
        return cap
    raise ConfigError(f"resources.{rule}.runtime: a job of {rounds} run(s) needs {need} minutes, more than max_job_minutes "
                      f"({cap}), and only training continues in a next job; run fewer seeds per job (seeds_per_job) or "
                      "raise max_job_minutes")


def continuations(config: dict, rule: str, rounds_per_job: list[int]) -> int:
    """How many jobs after its first the longest training job of `rule` takes at max_job_minutes
    (the rule's retries, beside those for failures)."""
    need, cap = config["resources"][rule]["runtime"], config.get("max_job_minutes", 1440)
    return max((-(-need * rounds // cap) - 1 for rounds in rounds_per_job), default=0)


def check_recipe(task: str, recipe: dict, where: str, averages_read: bool = True) -> None:
    """What a typo makes silently wrong and the schema cannot see: a learning-rate schedule that
    never applies, an average over checkpoints that training does not keep or never writes, step
    checkpoints kept that no average reads (disk), training sentences longer than the model's positions;
    and, where the scale's scores are read (`averages_read`), an average over checkpoints that do not
    stand for the trained model (recipes.averaging_problem)."""
    if task == "classification":
        milestones = recipe["lr_milestones"]
        if milestones != sorted(set(milestones)):
            raise ConfigError(f"{where}: classification.lr_milestones {milestones} must be strictly increasing")
        if milestones and milestones[-1] >= recipe["epochs"]:
            raise ConfigError(f"{where}: classification.lr_milestones {milestones} must lie within the "
                              f"{recipe['epochs']} epochs (epoch {milestones[-1]} is never reached)")
        decay = recipe.get("lr_decay", 0.1)
        if isinstance(decay, list) and len(decay) != len(milestones):
            raise ConfigError(f"{where}: classification.lr_decay {decay} needs one factor per milestone "
                              f"({len(milestones)}: {milestones})")
    else:
        updates, every, last = recipe["max_updates"], recipe["checkpoint_every"], recipe["average_last"]
        written = -(-updates // every)  # every `every` updates, and at the last update
        if last > recipe["keep_checkpoints"]:
            raise ConfigError(f"{where}: {task}.average_last ({last}) exceeds keep_checkpoints "
                              f"({recipe['keep_checkpoints']}): training keeps only the newest {recipe['keep_checkpoints']}")
        if last > written:
            raise ConfigError(f"{where}: {task}.average_last ({last}) exceeds the {written} checkpoints that "
                              f"max_updates {updates} at checkpoint_every {every} writes")
        if averages_read and (problem := recipes.averaging_problem(task, recipe)):
            raise ConfigError(f"{where}: {task}: {problem}; the averaged checkpoints must all lie after the warm-up and in the "
                              f"last {recipes.AVERAGED_PART:.0%} of training: lower average_last or checkpoint_every, "
                              "or shorten warmup")
        if "max_train_len" in recipe:
            _check_max_train_len(task, recipe, where)
        if task == "translation" and recipe.get("compile") in recipes.GRAPH_REPLAYS and not recipe.get("length_bucket"):
            raise ConfigError(f"{where}: {task}.compile {recipe['compile']!r} replays a CUDA graph recorded for each batch shape, and "
                              "batches as long as their longest sentence take a shape each: set length_bucket (e.g. 8) so that "
                              "batches take few shapes")
        if task == "captioning" and recipe.get("compile") in recipes.GRAPH_REPLAYS:
            raise ConfigError(f"{where}: {task}.compile {recipe['compile']!r} replays a CUDA graph recorded for each batch shape, and "
                              "captioning batches are as long as their longest caption, a shape each (captioning has no "
                              "length_bucket): use compile false or max-autotune-no-cudagraphs")


def _check_max_train_len(task: str, recipe: dict, where: str) -> None:
    """A training batch's longest side, max_train_len rounded up to the length bucket it is padded
    to, must have a row in the model's sinusoid table (catalog.MAX_POSITIONS)."""
    limit, bucket = recipe["max_train_len"], recipe.get("length_bucket", 0)
    padded = -(-limit // bucket) * bucket if bucket else limit
    if padded > catalog.MAX_POSITIONS:
        rounded = f" (padded to length_bucket {bucket}: {padded})" if bucket else ""
        raise ConfigError(f"{where}: {task}.max_train_len {limit}{rounded} exceeds the {catalog.MAX_POSITIONS} positions "
                          "the model holds; lower it")


def model_keys(run: Run) -> dict:
    """What the run's model reads of its recipe beyond its size, variant and args (the
    architecture's run_keys, e.g. paper 003's `init`): a parameter count of the row needs them."""
    recipe = json.loads(run.recipe_json)
    return {key: recipe[key] for key in catalog.architecture(run.model).run_keys if key in recipe}


def train_spec(config: dict, run: Run) -> specs.TrainSpec:
    """Everything a training job needs, flat and deterministic: it becomes the rule's params, so
    changing any value reruns exactly the runs that read it. Evaluation settings are left out
    (`eval_spec`): changing them never retrains."""
    values = {
        "task": run.task,
        "dataset": run.dataset,
        "arch": run.arch_dir,
        "model": run.model,
        catalog.architecture(run.model).size_key: run.size,
        "variant": run.variant,
        "args": json.loads(run.args_json),
        "seed": run.seed,
        **recipes.training_part(run.task, json.loads(run.recipe_json)),
    }
    if run.task in ("translation", "captioning"):
        # The GPU count is part of the recipe: each rank takes a batch, so it sets the batch.
        values.update(_model_ids(run), world_size=max(1, gpus_for(config, run)))
    return specs.TrainSpec.from_dict(values)


def job_train_spec(config: dict, runs: list[Run]) -> specs.TrainSpec:
    """A training job's spec: its runs' train_spec without the seed, which is all they differ in
    (the job gets its seeds apart, and gives each run its own)."""
    cell_specs = [train_spec(config, run).replace(seed=specs.MISSING) for run in runs]
    if any(spec != cell_specs[0] for spec in cell_specs[1:]):  # group_into_jobs groups one cell's runs
        raise ValueError(f"a job's runs differ in more than their seed: {[run.path for run in runs]}")
    return cell_specs[0]


def eval_spec(run: Run) -> specs.EvalSpec:
    """What evaluating a trained translation or captioning run needs: the model's identity and the evaluation
    settings (recipes.EVAL_KEYS). The evaluation rules' params: changing it reruns only them."""
    return specs.EvalSpec.from_dict({**_model_ids(run), **recipes.evaluation_part(run.task, json.loads(run.recipe_json))})


def _model_ids(run: Run) -> dict:
    from .data.subword import BOS_ID, EOS_ID, PAD_ID

    return {"model": run.model, "size": run.size, "variant": run.variant, "args": json.loads(run.args_json),
            "pad_id": PAD_ID, "bos_id": BOS_ID, "eos_id": EOS_ID}
