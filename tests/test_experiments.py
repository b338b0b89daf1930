"""The papers' tables as data, and config checks that fail before any job (naming the key)."""

import copy
import json

import pytest
import yaml
from fake_runs import CONFIG, TABLES, tiny_config

from resrepro import experiments
from resrepro.residual import ConfigError


@pytest.fixture
def mini():
    with open(f"{CONFIG}/mini.yaml") as f:
        return yaml.safe_load(f)


@pytest.fixture
def live_mini():
    with open("config/mini.yaml") as f:
        return yaml.safe_load(f)


@pytest.mark.config
def test_every_issue_table_is_present_with_paper_values():
    tables = experiments.load_tables("config/tables")
    for table_id in ("rskip-t1", "rskip-t3", "rskip-t4", "rskip-t6", "sas-t4", "sas-t6", "sas-t7", "sas-fn1"):
        assert table_id in tables
    # spot checks against the papers' text
    t1 = {r["label"]: r["paper"] for r in tables["rskip-t1"]["rows"]}
    assert t1["2rSkip+LN"] == 6.02 and t1["3xSkip"] == 9.23
    fn = {r["label"]: r["paper"] for r in tables["sas-fn1"]["rows"]}
    assert sorted(fn.values()) == [93.95, 94.05]
    assert len(tables["rskip-t6"]["rows"]) == 10


def test_mini_plan_shares_cells_between_equivalent_rows(mini):
    plan = experiments.make_plan(mini)
    rows = {(r["table"], r["label"]): r["runs"] for r in plan.rows}
    # paper 001: "1xSkip is equivalent to Baseline and 1rSkip+LN is equivalent to 1xSkip+LN"
    assert rows[("rskip-t1", "Baseline (He et al. 2016b)")] == rows[("rskip-t1", "1xSkip")]
    assert rows[("rskip-t1", "1rSkip+LN")] == rows[("rskip-t1", "1xSkip+LN")]
    # the CIFAR-10 add baseline is one cell for every table that uses it: a table of fewer seeds reads its first ones
    fewer = rows[("sas-t7", "x + F (Baseline)")]
    assert len(fewer) < len(rows[("rskip-t1", "1xSkip")]) and fewer == rows[("rskip-t1", "1xSkip")][:len(fewer)]
    seeds = {"classification": mini["seeds"], "translation": mini["translation"]["seeds"], "captioning": mini["captioning"]["seeds"]}
    tasks = {table_id: table["task"] for table_id, table in plan.tables.items()}
    own = mini["table_seeds"]  # a table that sets its own count (noise-t2: float64 on the CPU)
    assert all(len(runs) == own.get(table, seeds[tasks[table]]) for (table, _), runs in rows.items())
    assert {len(runs) for (table, _), runs in rows.items() if table == "noise-t2"} == {2}


@pytest.mark.config
def test_paper_plan_runs_five_seeds_at_the_papers_depths():
    with open("config/paper.yaml") as f:
        paper = yaml.safe_load(f)
    plan = experiments.make_plan(paper)
    assert {run.seed for run in plan.runs.values() if "simple_net" not in run.arch_dir} == {0, 1, 2, 3, 4}
    # paper 002's Figure 9 repeats its four nets "10 times each"; nothing else runs a sixth seed
    tenfold = {(r.arch_dir, r.variant) for r in plan.runs.values() if r.seed == 9}
    assert tenfold == {(f"simple_net{d}", v) for d in (32, 44) for v in ("plain", "add")}
    assert {run.arch_dir for run in plan.runs.values() if run.task == "classification"} == {
        *(f"preact_resnet{d}" for d in (20, 32, 38, 44, 56, 110)), "single_rep_resnet_paper", "avgpool_resnet_paper", "wide_resnet_paper",
        *(f"shared_resnet_ubn_{d}" for d in (110, 146, 182)), *(f"shared_resnet_{s}_110" for s in ("naive", "stats", "stats_gamma")),
        *(f"simple_net{d}" for d in (20, 32, 44)), *(f"simple_net_diagonal{d}" for d in (20, 32, 44)),  # paper 002's simplified nets
        "resnet_cifar20"}  # and its fully fledged ResNet-20 with the plain counterpart
    assert {run.arch_dir for run in plan.runs.values() if run.task == "translation"} == {"transformer_base", "transformer_big", "transformer_base_2block"}
    assert {run.arch_dir for run in plan.runs.values() if run.task == "captioning"} == {"captioner_paper"}
    assert set(plan.datasets()) == {"cifar10", "cifar100", "iwslt15_en_vi", "wmt14_en_de", "wmt14_en_fr", "mscoco"}
    run = next(r for r in plan.runs.values() if r.arch_dir == "preact_resnet110" and r.recipe == "default")
    spec = experiments.train_spec(paper, run)
    assert (spec.epochs, spec.lr_milestones, spec.weight_decay, spec.warmup_iterations) == (164, [81, 122], 2e-4, 400)
    # paper 003's own protocol (Sec. 4) for its nets; one run each, as its figures show
    recipes = {(r.arch_dir, r.recipe) for r in plan.runs.values() if r.recipe.startswith("iter-")}
    assert {(r, recipe) for r, recipe in recipes if not r.startswith(("preact", "shared"))} == {
        ("single_rep_resnet_paper", "iter-single+iter-snapshots"), ("avgpool_resnet_paper", "iter-pool+iter-snapshots"),
        ("wide_resnet_paper", "iter-wide+iter-snapshots")}
    # Table 1's nets (and Figs. 6-9's) train by the original ResNet's recipe, 4 seeds (Table 1, Fig. 7)
    assert {recipe for r, recipe in recipes if r.startswith("preact")} == {"iter-resnet110+iter-snapshots+iter-init"}
    assert {recipe for r, recipe in recipes if r.startswith("shared")} == {"iter-resnet110+iter-shared+iter-snapshots+iter-init"}
    shared = experiments.train_spec(paper, next(r for r in plan.runs.values() if r.arch_dir.startswith("shared")))
    assert (shared.epochs, shared.lr_milestones) == (200, [80, 120])  # the axes of its Figures 18-19
    assert {r.seed for r in plan.runs.values() if r.recipe.startswith("iter-resnet110")} == {0, 1, 2, 3}
    single = experiments.train_spec(paper, next(r for r in plan.runs.values() if r.recipe == "iter-single+iter-snapshots"))
    assert (single.epochs, single.lr_milestones, single.lr_decay, single.warmup_iterations) == (200, [40, 60, 80], 0.2, 0)
    assert single.snapshots == 20  # every 10 epochs' weights, for the figures over training


@pytest.mark.parametrize(
    "seeds_per_job, jobs",
    [("all", ["seeds0-4"]), (2, ["seeds0-1", "seeds2-3", "seeds4"]), (1, ["seeds0", "seeds1", "seeds2", "seeds3", "seeds4"]),
     (7, ["seeds0-4"]),
     # per task: a classification table's cells take classification's count, and a task left out 1
     ({"classification": 2, "translation": "all"}, ["seeds0-1", "seeds2-3", "seeds4"]),
     ({"translation": "all"}, ["seeds0", "seeds1", "seeds2", "seeds3", "seeds4"])],
)
def test_a_cells_seeds_are_grouped_into_jobs(mini, seeds_per_job, jobs):
    plan = experiments.make_plan({**mini, "seeds": 5, "table_seeds": {}, "tables": ["sas-fn1"], "figures": [], "seeds_per_job": seeds_per_job})
    cells = sorted({run.cell_path for run in plan.runs.values()})
    assert len(cells) == 2 and sorted(plan.jobs) == sorted(f"{cell}/{job}" for cell in cells for job in jobs)
    for job, runs in plan.jobs.items():  # a job's runs: its cell's, in seed order, each in exactly one job
        first, _, last = job.rsplit("/seeds", 1)[1].partition("-")
        assert runs == [f"{job.rsplit('/', 1)[0]}/seed{s}" for s in range(int(first), int(last or first) + 1)]
        assert all(plan.job_of(run) == job for run in runs)
    assert sorted(run for runs in plan.jobs.values() for run in runs) == sorted(plan.runs)


def test_stacking_is_refused_beside_classification_seeds_side_by_side_only(mini):
    config = {**mini, "tables": ["sas-fn1"], "figures": [], "seeds_stacked": True}
    with pytest.raises(ConfigError, match=r"seeds_in_parallel 2 would start them as separate processes too"):
        experiments.make_plan({**config, "seeds_in_parallel": {"classification": 2}})
    assert experiments.make_plan({**config, "seeds_in_parallel": {"translation": 2}}).jobs  # another task's processes: no conflict


def test_a_jobs_spec_is_its_runs_spec_without_the_seed(mini):
    plan = experiments.make_plan({**mini, "tables": ["sas-fn1"]})
    job, paths = next(iter(plan.jobs.items()))
    runs = [plan.runs[p] for p in paths]
    spec = experiments.job_train_spec(mini, runs)
    assert "seed" not in spec.to_dict() and len(runs) == mini["table_seeds"]["sas-fn1"]
    assert all(experiments.train_spec(mini, run) == spec.replace(seed=run.seed) for run in runs)
    other = next(plan.runs[p] for p in plan.runs if plan.job_of(p) != job)
    with pytest.raises(ValueError, match="differ in more than their seed"):
        experiments.job_train_spec(mini, [runs[0], other])


def test_table_seeds_override_one_table(mini):
    cfg = {**mini, "table_seeds": {"rskip-t6": 3}, "seeds": 2}
    plan = experiments.make_plan(cfg)
    t6 = [r for r in plan.rows if r["table"] == "rskip-t6"]
    t1 = [r for r in plan.rows if r["table"] == "rskip-t1"]
    assert all(len(r["runs"]) == 3 for r in t6) and all(len(r["runs"]) == 2 for r in t1)


def test_table_seeds_may_name_a_figure_whose_cells_only_it_trains(mini):
    """Paper 003's nets are trained for its figures alone: table_seeds gives them their own count,
    while a figure cell that a table also names keeps the table's runs and measures its seeds."""
    plan = experiments.make_plan({**mini, "seeds": 3, "table_seeds": {"iter-f2": 1, "sas-f4": 1}})
    cells = {(m["figure"], m["label"]): m["runs"] for m in plan.measures if m["figure"] in ("iter-f2", "sas-f4")}
    assert cells["iter-f2", "single representation"] == ["classification/digits/single_rep_resnet_mini/default/add/seed0"]
    assert cells["iter-f2", "original ResNet-110"] == ["classification/digits/preact_resnet32/iter-init/add/seed0"]  # paper 003's init
    iter_t1 = next(r for r in plan.rows if r["table"] == "iter-t1" and r["label"] == "ResNet-110, CIFAR-10")["runs"]
    assert cells["iter-f2", "original ResNet-110"][0] in iter_t1 and len(iter_t1) == 3
    assert cells["sas-f4", "x + F"] == ["classification/digits/preact_resnet32/default/add/seed0"]  # He et al.'s init
    rskip_t1 = next(r for r in plan.rows if r["table"] == "rskip-t1" and r["row"] == 0)["runs"]
    assert cells["sas-f4", "x + F"][0] in rskip_t1 and len(rskip_t1) == 3


@pytest.mark.config
def test_every_mini_classification_run_keeps_snapshots_so_no_figure_trains_a_cell_twice(live_mini):
    """Snapshots are in mini's base recipe: paper 003's figures over training read the tables'
    runs where the cell is the same (ResNet-110, UBN-110), and every run has one recipe folder:
    paper 002 has its own (docs/noise.md), paper 003's PreAct-ResNets their init."""
    plan = experiments.make_plan(live_mini)
    classification = [r for r in plan.runs.values() if r.task == "classification"]
    recipes = {r.recipe for r in classification if not r.model.startswith(("simple_net", "resnet_cifar", "preact", "shared"))}
    assert recipes == {"default"} and {r.recipe for r in classification if r.model.startswith("shared")} == {"iter-init"}
    assert all(json.loads(r.recipe_json)["snapshots"] == 3 for r in classification)
    over_training = {m["runs"][0] for m in plan.measures if m["figure"] == "iter-f5"}
    table_runs = {run for row in plan.rows for run in row["runs"]}
    assert len(over_training) == 4 and "classification/digits/preact_resnet32/iter-init/add/seed0" in over_training & table_runs


def test_every_papers_figures_are_planned_with_every_table(mini):
    """tables: all plans paper 003's figures, though no table of paper 003 exists yet; a list of
    tables plans the figures of its papers only."""
    assert {f for f in experiments.make_plan(mini).figures if f.startswith("iter-")} >= {"iter-f2", "iter-f3", "iter-f4"}
    assert not [f for f in experiments.make_plan({**mini, "tables": ["rskip-t1"]}).figures if f.startswith("iter-")]


def test_a_refinement_matches_an_architecture(mini):
    cfg = copy.deepcopy(mini)
    cfg["classification"]["refine"] = [{"name": "iter-wide", "when": {"paper": "iter", "arch": "wide_resnet"},
                                        "set": {"epochs": 9, "lr_milestones": [3, 6], "lr_decay": [0.2, 0.5]}, "source": "s"}]
    plan = experiments.make_plan(cfg)
    wide = [r for r in plan.runs.values() if r.model == "wide_resnet"]
    others = [r for r in plan.runs.values() if r.task == "classification" and r.model != "wide_resnet"]
    assert wide and all(r.recipe == "iter-wide" and json.loads(r.recipe_json)["lr_decay"] == [0.2, 0.5] for r in wide)
    assert others and all(r.recipe == "default" for r in others)
    assert experiments.train_spec(cfg, wide[0]).lr_decay == [0.2, 0.5]


def test_graph_replays_of_the_weight_shared_nets_are_refused_before_any_job(mini):
    cfg = copy.deepcopy(mini)
    cfg["classification"]["compile"] = "cudagraphs"
    with pytest.raises(ConfigError, match=r"compile 'cudagraphs' replays CUDA graphs, and shared_resnet_\w+ trained otherwise"):
        experiments.make_plan(cfg)
    cfg["classification"]["compile"] = "auto"
    assert experiments.make_plan(cfg).runs


def test_one_decay_factor_per_milestone(mini):
    cfg = copy.deepcopy(mini)
    cfg["classification"]["lr_milestones"] = [2, 3]
    cfg["classification"]["lr_decay"] = [0.2]
    with pytest.raises(ConfigError, match=r"lr_decay \[0.2\] needs one factor per milestone \(2: \[2, 3\]\)"):
        experiments.make_plan(cfg)


def _bad_tables(tmp_path, mutate):
    tables = yaml.safe_load(open(f"{TABLES}/rskip.yaml"))
    mutate(tables)
    (tmp_path / "rskip.yaml").write_text(yaml.safe_dump(tables))
    return tmp_path


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda t: t["rskip-t1"]["rows"][2].update(variant="xskipp"), "unknown variant 'xskipp'; allowed:"),
        (lambda t: t["rskip-t1"]["rows"][2]["args"].update(lam="2"), "lam='2' is invalid"),
        (lambda t: t["rskip-t1"]["rows"][2]["args"].update(lam=-1), "lam=-1 is invalid"),
        (lambda t: t["rskip-t1"]["rows"][8]["args"].update(lam=1.5), "lam=1.5 is invalid; expected an integer >= 1"),
        (lambda t: t["rskip-t1"]["rows"][2]["args"].update(mu=1), "has no argument 'mu'; allowed: lam"),
        (lambda t: t["rskip-t1"]["rows"][2].pop("dataset"), "rows[2]: missing key 'dataset'"),
        (lambda t: t["rskip-t1"].update(metric="rouge"), "metric='rouge' unknown; allowed: test_error, test_accuracy, bleu"),
        (lambda t: t["rskip-t1"].update(baseline="nope"), "baseline 'nope' is not a row label"),
    ],
)
def test_bad_tables_fail_naming_the_key(tmp_path, mini, mutate, message):
    cfg = {**mini, "tables_dir": str(_bad_tables(tmp_path, mutate))}
    with pytest.raises(ConfigError) as err:
        experiments.make_plan(cfg)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"tables": ["rskip-t99"]}, "tables: unknown table 'rskip-t99'; allowed: all, "),
        ({"table_seeds": {"nope": 2}}, "table_seeds: unknown table or figure 'nope'"),
        ({"classification": {"datasets": {"cifar10": "digits"}}}, "'cifar100' has no entry in classification.datasets"),
        ({"classification": {"depths": {20: 8}}}, "has no entry in classification.depths; it maps: ['20']"),
    ],
)
def test_bad_profile_fails_naming_the_key(mini, change, message):
    cfg = copy.deepcopy(mini)
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict) and key == "classification":
            cfg[key].update(value)
        else:
            cfg[key] = value
    with pytest.raises(ConfigError) as err:
        experiments.make_plan(cfg)
    assert message in str(err.value)


def test_seeds_precedence_table_then_task_then_default(mini):
    cfg = copy.deepcopy(mini)
    cfg["seeds"], cfg["translation"]["seeds"], cfg["table_seeds"] = 3, 2, {"rskip-t5": 4}
    plan = experiments.make_plan(cfg)
    n = {(r["table"]): len(r["runs"]) for r in plan.rows}
    assert (n["rskip-t1"], n["rskip-t2"], n["rskip-t5"]) == (3, 2, 4)
    run = next(r for r in plan.runs.values() if r.task == "translation")
    assert "seeds" not in experiments.train_spec(cfg, run).to_dict()  # seeds never rerun existing runs


# --------------------------------------------------- --config overrides, as the Snakefile reads them


def snakefile_config(*overrides: str, configfile: str = "tests/configs/tiny.yaml") -> dict:
    """The config the Snakefile sees: the --configfile (tiny: over the fixture tables), then --config
    entries (parsed by Snakemake's own parser), typed by the schema and validated, as the Snakefile does."""
    from snakemake.cli import parse_config
    from snakemake.utils import update_config, validate

    from resrepro.config_types import coerce_overrides, validate_refinements

    if configfile == "tests/configs/tiny.yaml":
        config = tiny_config()
    else:
        with open(configfile) as f:
            config = yaml.safe_load(f)
    update_config(config, parse_config(list(overrides)))
    coerce_overrides(config, SCHEMA)
    validate(config, SCHEMA)
    validate_refinements(config, SCHEMA)
    return config


SCHEMA = "workflow/schemas/config.schema.yaml"


@pytest.mark.parametrize(
    "override, message",
    [
        ("tables=[rskip-t99]", "unknown table 'rskip-t99'"),
        ("seeds=two", "seeds"),
        ("seeds=0", "seeds"),
        ("report_epoch=last", "report_epoch"),
        ("table_seeds={rskip-t1: 0}", "table_seeds"),
        ("gpus_per_job=2", "gpus_per_job"),
        ("partial=maybe", "partial"),
        ("classification={epochs: 0}", "epochs"),
        ("translation={gpus: {wmt14_en_de: 2}}", "translation.gpus: 'wmt14_en_de' is not a dataset this scale runs"),
        ("resources={train_classifier: {mem_mb: 0}}", "mem_mb"),
        ("resources={train_classifier: {mem_mb: lots}}", "mem_mb"),
        ("resources={train_clasifier: {mem_mb: 100}}", "train_clasifier"),
        ("unknown_key=1", "unknown_key"),
        ("download_urls={cifar10: 'htp:/x'}", "download_urls.cifar10: 'htp:/x' is neither a URL"),
        ("download_urls={cifar100: 'not a url'}", "download_urls.cifar100: 'not a url' is neither a URL"),
        ("download_urls={mscoco: ''}", "download_urls.mscoco: empty"),
        ("download_urls={iwslt15_en_vi: 'https:/mirror/iwslt'}", "download_urls.iwslt15_en_vi: 'https:/mirror/iwslt' names no host"),
        ("download_urls={imagenet: 'https://mirror.example/imagenet.tar'}", "download_urls.imagenet: no rule downloads 'imagenet'"),
        ("download_urls={wmt14_en_de_stanford: 'https://mirror.example/'}", "download_urls.wmt14_en_de_stanford: no rule downloads"),
        ("download_md5={'imagenet/x.tar': 0123456789abcdef0123456789abcdef}", "download_md5.imagenet/x.tar: expected <download>/<file name>"),
        ("download_md5={cifar10: 0123456789abcdef0123456789abcdef}", "download_md5.cifar10: expected <download>/<file name>"),
        ("download_md5={'mscoco/train2014.zip': not-an-md5}", "download_md5"),
        ("download_mirrors={'mscoco/captions.zip': ['https://mirror.example/c.zip']}", "download_mirrors.mscoco/captions.zip: not a file the fetch rules get"),
        ("download_mirrors={'mscoco/caption_datasets.zip': ['htp:/x']}", "download_mirrors.mscoco/caption_datasets.zip: 'htp:/x' is neither a URL"),
        ("download_mirrors={'mscoco/caption_datasets.zip': 'https://mirror.example/c.zip'}", "download_mirrors"),  # a list, not one URL
    ],
)
def test_bad_config_override_fails_naming_the_key(override, message):
    """Each fails in the schema or the plan, both of which run when Snakemake parses the workflow
    (test_workflow.py shows for some of them that no job starts)."""
    from snakemake.exceptions import WorkflowError

    with pytest.raises((WorkflowError, ConfigError)) as err:
        experiments.make_plan(snakefile_config(override))
    assert message in str(err.value)


def test_good_overrides_are_typed_and_planned():
    config = snakefile_config("classification={epochs: 3, lr: 0.05}", "table_seeds={rskip-t4: 2}", "tables=[rskip-t4]")
    assert (config["classification"]["epochs"], config["classification"]["lr"]) == (3, 0.05)
    plan = experiments.make_plan(config)
    assert {len(r["runs"]) for r in plan.rows} == {2} and len(plan.rows) == 12  # 7 of Table 4, 5 of Table 1 beside them


def test_download_urls_take_urls_and_existing_files_or_folders(tmp_path):
    archive = tmp_path / "cifar-100-python.tar.gz"
    archive.write_bytes(b"")
    config = snakefile_config("download_urls={cifar10: 'https://mirror.example/cifar-10-python.tar.gz', "
                              f"cifar100: '{archive}', iwslt15_en_vi: 'ftp://mirror.example/iwslt/', "
                              f"mscoco: '{tmp_path.as_uri()}', wmt14_en_de: 'config', resnet101: 'http://mirror.example/models'}}")
    experiments.make_plan(config)


GOOD_ROW = {"label": "x+F", "dataset": "cifar10", "depth": 20, "variant": "add", "paper": 8.0}


@pytest.mark.parametrize(
    "row, message",
    [
        ({"variant": "resnext"}, "rows[0].args: unknown variant 'resnext'"),
        ({"variant": "xskip", "args": {"lam": -1}}, "lam"),
        ({"variant": "xskip", "args": {"lamda": 2}}, "xskip has no argument 'lamda'"),
        ({"dataset": None}, "missing key 'dataset'"),
        ({"dataset": "imagenet"}, "'imagenet' has no entry in classification.datasets"),
        ({"depth": 1202}, "1202 has no entry in classification.depths"),
        ({"paper_parameters": "65M"}, "rows[0].paper_parameters: expected a positive whole count"),
        ({"paper_parameters": 0}, "rows[0].paper_parameters: expected a positive whole count"),
        ({"paper_train_error": "1.5%"}, "rows[0].paper_train_error: expected a percentage (0 to 100)"),
        ({"paper_train_error": 100.5}, "rows[0].paper_train_error: expected a percentage (0 to 100)"),
        ({"paper_train_error": -0.1}, "rows[0].paper_train_error: expected a percentage (0 to 100)"),
        ({"paper_train_error": True}, "rows[0].paper_train_error: expected a percentage (0 to 100)"),
        ({"metric": "train_los"}, "rows[0]: metric='train_los' unknown; allowed: test_error, test_accuracy, bleu, train_loss"),
        ({"claim": "equal"}, "rows[0]: claim='equal' unknown; allowed: direction, same"),
        ({"claim": "same"}, "rows[0]: claim=same compares the row with its baseline: name one"),
    ],
)
def test_a_table_file_with_one_bad_row_names_table_row_and_key(tmp_path, row, message):
    """Each bad key is caught with its name; the good row with edge values (0 and 100) passes."""
    row = {k: v for k, v in {**GOOD_ROW, **row}.items() if v is not None}
    table = {"paper": "rskip", "caption": "c", "source": "s", "task": "classification", "metric": "test_error", "rows": [row]}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"bad-t1": table}))
    with pytest.raises(ConfigError) as err:
        experiments.make_plan(snakefile_config(f"tables_dir={tmp_path}", "tables=all"))
    assert message in str(err.value) and "bad-t1" in str(err.value)


def test_a_rows_baseline_must_have_its_metric(tmp_path):
    """Paper 002's tables give each net a loss row and an error row: a verdict compares one metric."""
    rows = [{**GOOD_ROW, "label": "plain, loss", "variant": "plain", "metric": "train_loss", "paper": 0.07},
            {**GOOD_ROW, "label": "residual, loss", "metric": "train_loss", "paper": 0.04, "baseline": "plain, loss"},
            {**GOOD_ROW, "label": "residual, error", "paper": 11.3, "baseline": "plain, loss"}]
    table = {"paper": "noise", "caption": "c", "source": "s", "task": "classification", "metric": "test_error", "rows": rows}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"bad-t1": table}))
    with pytest.raises(ConfigError, match=r"rows\[2\]: its metric is test_error, its baseline 'plain, loss''s is train_loss"):
        experiments.load_tables(tmp_path)
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"ok-t1": {**table, "rows": rows[:2]}}))
    assert experiments.row_metric(table, experiments.load_tables(tmp_path)["ok-t1"]["rows"][1]) == "train_loss"


@pytest.mark.parametrize("train_error", [0, 100, 1.53])
def test_a_train_error_from_0_to_100_is_accepted(tmp_path, train_error):
    table = {"paper": "rskip", "caption": "c", "source": "s", "task": "classification", "metric": "test_error",
             "rows": [{**GOOD_ROW, "paper_train_error": train_error}]}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"ok-t1": table}))
    assert experiments.load_tables(tmp_path)["ok-t1"]["rows"][0]["paper_train_error"] == train_error


@pytest.mark.parametrize("references, message", [
    ([{"label": "GLIED", "source": "s"}], "references[0]: missing key 'paper'"),
    ([{"label": "GLIED", "source": "s", "paper": {"bleu": 1.0}}], "'bleu' is not a metric of this table's rows: ['test_error']"),
    ([{"label": "GLIED", "source": "s", "paper": {"test_error": "-"}}], "paper.test_error: expected a number or null; got '-'"),
])
def test_reference_rows_name_the_tables_metrics_and_numbers(tmp_path, references, message):
    """A row the paper prints from other work (sas-t5's GLIED): checked where it is written."""
    table = {"paper": "rskip", "caption": "c", "source": "s", "task": "classification", "metric": "test_error", "rows": [GOOD_ROW],
             "references": references}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"bad-t1": table}))
    with pytest.raises(ConfigError) as err:
        experiments.load_tables(tmp_path)
    assert message in str(err.value) and "bad-t1.references[0]" in str(err.value)
    table["references"] = [{"label": "GLIED", "source": "s", "paper": {"test_error": None}}]
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"ok-t1": table}))
    assert experiments.load_tables(tmp_path)["ok-t1"]["references"][0]["paper"] == {"test_error": None}


def test_the_tables_beyond_the_papers_are_opt_in(mini):
    """`tables: all` leaves beyond-t1/t2 out (the default run's budget); `beyond: true` or naming
    them selects them; their rows carry no paper value."""
    assert not [t for t in experiments.make_plan(mini).tables if t.startswith("beyond")]
    both = experiments.make_plan({**mini, "beyond": True})
    assert {"beyond-t1", "beyond-t2"} <= set(both.tables) and "rskip-t1" in both.tables
    named = experiments.make_plan({**mini, "tables": ["beyond-t2"]})
    assert list(named.tables) == ["beyond-t2"]
    assert all(row["paper"] is None for row in named.tables["beyond-t2"]["rows"])
    variants = {row["variant"] for row in both.tables["beyond-t1"]["rows"]}
    assert {"pre_ln", "rezero", "skipinit", "layerscale", "deepnorm", "admin", "rskip_ln", "sas", "add"} <= variants


@pytest.mark.parametrize("table, message", [
    ({"paper": "beyond", "rows": [{**GOOD_ROW, "paper": 6.0}]}, "rows[0]: a table beyond the papers has no paper values"),
    ({"paper": "noise", "rows": [{**GOOD_ROW, "arch": "simple_net", "depth": 20, "variant": "deepnorm"}]},
     "rows[0]: variant 'deepnorm' needs its model's depth and hooks, which simple_net does not supply"),
])
def test_beyond_rows_and_placed_variants_are_checked_when_parsed(tmp_path, table, message):
    table = {"caption": "c", "source": "s", "task": "classification", "metric": "test_error", **table}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"bad-t1": table}))
    with pytest.raises(ConfigError) as err:
        experiments.make_plan(snakefile_config(f"tables_dir={tmp_path}", "tables=all"))
    assert message in str(err.value) and "bad-t1" in str(err.value)


def test_captioning_is_refused_at_parse_without_java_or_pycocoevalcap(monkeypatch, tmp_path):
    """METEOR and the PTB tokenizer need Java; missing, the evaluation would fail after the captioners
    trained (a lent GPU machine had neither Java nor pycocoevalcap). The bundled Java is a
    dependency: refused only where the config chose another that is not there."""
    import importlib.util

    plan = experiments.make_plan(snakefile_config(configfile=f"{CONFIG}/mini.yaml"))
    assert any(run.task == "captioning" for run in plan.runs.values())
    monkeypatch.setenv("PATH", str(tmp_path))  # no system java
    experiments.check_captioning_scorers(plan)  # the bundled one: installed with the package
    with pytest.raises(ConfigError, match=r"java: system, but no java on PATH \(install one, `module load java`, or set java: bundled\)"):
        experiments.check_captioning_scorers(plan, "system")
    with pytest.raises(ConfigError, match=f"java: {tmp_path}/java, which is not an executable file"):
        experiments.check_captioning_scorers(plan, f"{tmp_path}/java")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pycocoevalcap" else real_find_spec(name, *a))
    with pytest.raises(ConfigError, match="no java on PATH .*; the pycocoevalcap package is not installed"):
        experiments.check_captioning_scorers(plan, "system")
    without = experiments.make_plan(snakefile_config("tables=[sas-t3]", "figures=[]", configfile=f"{CONFIG}/mini.yaml"))
    assert not any(run.task == "captioning" for run in without.runs.values())
    experiments.check_captioning_scorers(without)  # nothing to score: nothing refused


def test_the_workflow_checks_the_captioning_scorers_where_it_plans():
    from pathlib import Path

    assert 'if config["check_scorers"]:\n    experiments.check_captioning_scorers(PLAN, config["java"])' in Path("workflow/rules/common.smk").read_text()
    assert snakefile_config()["check_scorers"] is True and snakefile_config("check_scorers=false")["check_scorers"] is False
