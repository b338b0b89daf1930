"""The rehearsal scale (config/rehearsal.yaml) is the paper scale with only lengths cut: the same
tables, figures, rules, recipes and refinements, every architecture at its paper size somewhere, and
data of its own, never the real data's folders."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from resrepro import experiments, recipes

pytestmark = pytest.mark.config  # checks config/rehearsal.yaml against config/paper.yaml

REPO = Path(__file__).resolve().parents[1]
# What the rehearsal may cut: how long, how much per batch, how much is scored.
# Not the translation warm-up: the inverse-sqrt schedule's peak rate grows as it shrinks.
LENGTH_KEYS = {"epochs", "lr_milestones", "warmup_iterations", "batch_size", "max_updates", "checkpoint_every",
               "max_tokens", "updates", "dev_sentences", "test_sentences"}
TASKS = ("classification", "translation", "captioning")


def scale(name: str) -> dict:
    return yaml.safe_load((REPO / "config" / f"{name}.yaml").read_text())


def assert_only_lengths_cut(paper: dict, rehearsal: dict, where: str, defaults: dict | None = None) -> None:
    """Same keys (the rehearsal may add the dev and test limits); equal values except lengths, which
    are at most the paper's (a list of milestones keeps its count). With `defaults` (a refinement's:
    the task's own recipe), a refinement may also cut a length the paper's leaves at the task's."""
    added = set(rehearsal) - set(paper)
    if defaults is not None:
        for key in added & (LENGTH_KEYS - {"dev_sentences", "test_sentences"}):
            assert rehearsal[key] <= defaults[key], f"{where}.{key}: {rehearsal[key]} is not a cut of {defaults[key]}"
        added -= LENGTH_KEYS
    assert set(paper) <= set(rehearsal) and added <= {"dev_sentences", "test_sentences"}, where
    for key, value in paper.items():
        if isinstance(value, dict):
            assert_only_lengths_cut(value, rehearsal[key], f"{where}.{key}")
        elif key not in LENGTH_KEYS:
            assert rehearsal[key] == value, f"{where}.{key}: {rehearsal[key]!r} != the paper's {value!r}"
        elif isinstance(value, list):
            assert len(rehearsal[key]) == len(value), f"{where}.{key}"
        else:
            assert rehearsal[key] <= value, f"{where}.{key}: {rehearsal[key]} is not a cut of {value}"


@pytest.mark.parametrize("task", TASKS)
def test_the_recipes_are_the_papers_with_only_lengths_cut(task):
    paper, rehearsal = scale("paper")[task], scale("rehearsal")[task]
    recipe = {k: v for k, v in paper.items() if k not in recipes.SCALE_KEYS}
    assert_only_lengths_cut(recipe, {k: v for k, v in rehearsal.items() if k not in recipes.SCALE_KEYS}, task)
    assert [r["name"] for r in rehearsal["refine"]] == [r["name"] for r in paper["refine"]]
    for ours, theirs in zip(rehearsal["refine"], paper["refine"]):
        assert ours["when"] == theirs["when"], ours["name"]
        assert_only_lengths_cut(theirs["set"], ours["set"], f"{task}.refine {ours['name']}", defaults=paper)
    assert rehearsal["datasets"] == paper["datasets"]  # the real datasets, through the real download and prepare code


def test_the_tables_figures_and_claims_are_the_papers():
    paper, rehearsal = scale("paper"), scale("rehearsal")
    for key in ("tables_dir", "tables", "beyond", "figures_dir", "figures", "claims", "report_epoch", "gpu_costs"):
        assert rehearsal[key] == paper[key], key
    assert rehearsal["captioning"]["features"] == paper["captioning"]["features"]


def plan_of(config: dict) -> experiments.Plan:
    return experiments.make_plan({**config, "download_urls": {}})


def test_every_architecture_runs_at_its_paper_size_in_at_least_one_cell():
    paper, rehearsal = plan_of(scale("paper")), plan_of(scale("rehearsal"))
    assert [(r["table"], r["label"]) for r in rehearsal.rows] == [(r["table"], r["label"]) for r in paper.rows]
    assert set(rehearsal.tables) == set(paper.tables) and len(rehearsal.measures) == len(paper.measures)
    architectures = {(run.task, run.arch_dir) for run in paper.runs.values()}
    assert architectures <= {(run.task, run.arch_dir) for run in rehearsal.runs.values()}
    # one seed a cell, but the depth-32 nets of noise-t3: their job trains 2 seeds side by side, as a CIFAR job of the paper's does
    shared = {path: runs for path, runs in rehearsal.jobs.items() if len(runs) > 1}
    assert {run.seed for path, run in rehearsal.runs.items() if not any(path in runs for runs in shared.values())} == {0}
    assert sorted(shared) == [f"classification/cifar10/simple_net32/noise/{v}/seeds0-1" for v in ("add", "plain")]
    assert experiments.seeds_at_once(scale("rehearsal"), "classification", 2) == 2


def test_its_data_never_lands_in_the_real_datas_folders():
    config = scale("rehearsal")
    assert config["downloads_dir"] != "resources" and config["data_dir"] != "results/data"
    for location in config["download_urls"].values():  # every download from the fake mirror
        assert location.startswith("resources/rehearsal/mirror/")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The workflow with empty stand-ins for the fake mirror."""
    from test_workflow import COPIED

    root = tmp_path_factory.mktemp("rehearsal")
    for item in COPIED:
        (shutil.copytree if (REPO / item).is_dir() else shutil.copy)(REPO / item, root / item)
    mirror_stand_ins(root)
    return root


def mirror_stand_ins(root: Path) -> None:
    """Empty files and folders where config/rehearsal.yaml's mirrors lie: parsing checks they exist."""
    for location in scale("rehearsal")["download_urls"].values():
        path = root / location
        if path.suffix:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        else:
            path.mkdir(parents=True, exist_ok=True)


def dry_run(workdir, *args: str) -> str:
    from test_workflow import snakemake

    out = snakemake(workdir, "-n", "-p", "--configfile", *args)
    return out.stdout + out.stderr


@pytest.mark.integration
def test_it_runs_every_rule_of_the_paper_scale_and_keeps_its_data_apart(workdir):
    from test_workflow import planned_jobs

    paper = planned_jobs(workdir, "--configfile", "config/paper.yaml")
    rehearsal = planned_jobs(workdir, "--configfile", "config/rehearsal.yaml")
    assert set(rehearsal) == set(paper)
    text = dry_run(workdir, "config/rehearsal.yaml")
    outputs = re.findall(r"^\s+output: (.*)$", text, re.M)
    data = [path for line in outputs for path in line.split(", ") if not path.startswith(("results/rehearsal/", "report/rehearsal/"))]
    assert all(path.startswith("resources/rehearsal/downloads/") for path in data), data
    assert "--lock resources/rehearsal/downloads/checksums.lock.json" in text


# Linux refuses one argument longer than 32 pages (MAX_ARG_STRLEN), and Snakemake hands a job's
# whole shell command to `bash -c` as one: a longer command fails only when its job starts.
MAX_ARG_STRLEN = 32 * os.sysconf("SC_PAGE_SIZE")


def longest_commands(dry_run_text: str) -> dict[str, int]:
    """Each rule's longest shell command in a dry run's text (-p), in bytes."""
    longest: dict[str, int] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", dry_run_text):
        if (rule := re.match(r"(?:local)?rule (\w+):", block)) and (command := re.search(r"^Shell command: (.*)$", block, re.M)):
            longest[rule.group(1)] = max(longest.get(rule.group(1), 0), len(command.group(1).encode()))
    return longest


@pytest.mark.integration
@pytest.mark.parametrize("config", ["config/paper.yaml", "config/rehearsal.yaml"])
def test_every_jobs_command_fits_in_one_argument(workdir, config):
    """The aggregate's command once carried the paper plan's table rows and figure cells as JSON,
    148 KB: the paper scale would have failed at its aggregate, after every run had trained. The
    plan is a file now (results/<scale>/plan.json)."""
    longest = longest_commands(dry_run(workdir, config, "--forceall"))
    assert {"parameters", "aggregate", "judge", "report", "train_classifier", "train_translator", "evaluate_captioning", "measure"} <= set(longest)
    assert max(longest.values()) < MAX_ARG_STRLEN, {rule: n for rule, n in longest.items() if n >= MAX_ARG_STRLEN}
    assert max(longest[r] for r in ("parameters", "aggregate", "judge")) < 1000 and longest["report"] < 16_000  # no plan in them (the report's: its recipe, a few KB)


@pytest.mark.integration
def test_md5_pins_reach_the_download_commands(workdir):
    pin = "0123456789abcdef0123456789abcdef"
    (workdir / "pins.yaml").write_text(yaml.safe_dump({"download_md5": {
        "wmt14_en_de/test-full.tgz": pin, "cifar10/cifar-10-python.tar.gz": pin, "resnet101/resnet101-cd907fc2.pth": pin}}))
    text = dry_run(workdir, "config/rehearsal.yaml", "pins.yaml")
    commands = {m.group(1): m.group(0) for m in re.finditer(r"^Shell command: resrepro (download cifar10|fetch-translation wmt14_en_de|fetch-translation wmt14_en_fr|fetch-backbone)\b.*$", text, re.M)}
    assert f"""--md5 '{{"test-full.tgz": "{pin}"}}'""" in commands["fetch-translation wmt14_en_de"]
    assert "--md5 '{}'" in commands["fetch-translation wmt14_en_fr"]
    assert f"""--md5 '{{"cifar-10-python.tar.gz": "{pin}"}}'""" in commands["download cifar10"]
    assert f"""--md5 '{{"resnet101-cd907fc2.pth": "{pin}"}}'""" in commands["fetch-backbone"]


@pytest.mark.integration
def test_the_data_comes_first_downloads_included(workdir):
    """A local run starts each download and preparation before any training that could wait: the
    captioning chain (MSCOCO's download, then ResNet-101 over every image) would otherwise start after
    the last CIFAR run (the rehearsal's first run showed it)."""
    text = dry_run(workdir, "config/paper.yaml")
    priorities = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", text):
        if m := re.match(r"(?:local)?rule (\w+):", block):
            found = re.search(r"^\s+priority: (\d+)$", block, re.M)
            priorities.setdefault(m.group(1), set()).add(int(found.group(1)) if found else 0)
    data_rules = {"download_cifar", "prepare_cifar", "fetch_translation", "prepare_translation", "fetch_coco", "fetch_backbone", "prepare_coco"}
    highest = max(max(p) for rule, p in priorities.items() if rule not in data_rules)
    for rule in data_rules:
        assert min(priorities[rule]) > highest, (rule, priorities[rule])


def test_rehearse_hands_every_option_after_it_to_snakemake(monkeypatch, capsys):
    from resrepro import cli, rehearsal

    calls = []
    monkeypatch.setattr(rehearsal, "rehearse", lambda args: calls.append(args) or 0)
    with pytest.raises(SystemExit) as done:
        cli.main(["rehearse", "--cores", "2", "-n", "--config", "seeds=1"])
    assert done.value.code == 0 and calls == [["--cores", "2", "-n", "--config", "seeds=1"]]
    with pytest.raises(SystemExit) as refused:  # any other command still refuses an unknown option
        cli.main(["prepare", "digits", "--out", "x.pt", "--cores", "2"])
    assert refused.value.code == 2 and "unrecognized arguments: --cores 2" in capsys.readouterr().err
