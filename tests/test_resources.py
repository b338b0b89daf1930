"""Every job of every scale asks for the memory and time its scale config gives its rule, none
falls back to a default, and none asks for more than max_job_minutes (read from dry runs)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from test_rehearsal import mirror_stand_ins
from test_workflow import COPIED, REPO, snakemake

pytestmark = pytest.mark.integration
SCALES = ["config/mini.yaml", "config/gpu-day.yaml", "config/paper.yaml", "config/rehearsal.yaml", "tests/configs/tiny.yaml"]


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    root = tmp_path_factory.mktemp("resources")
    for item in [*COPIED, "tests/configs"]:
        (shutil.copytree if (REPO / item).is_dir() else shutil.copy)(REPO / item, root / item)
    mirror_stand_ins(root)
    return root


def dry_run_jobs(workdir, configfile: str) -> list[tuple[str, dict[str, str]]]:
    """(rule, resources) of each job a dry run lists."""
    out = snakemake(workdir, "-n", "--configfile", configfile)
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out.stdout):
        if m := re.match(r"(?:local)?rule (\w+):", block):
            found = re.search(r"^\s+resources: (.*)$", block, re.M)
            pairs = dict(item.split("=", 1) for item in found.group(1).split(", ")) if found else {}
            jobs.append((m.group(1), pairs))
    return jobs


@pytest.mark.parametrize("configfile", SCALES)
def test_every_job_asks_for_its_rules_memory_and_time_from_the_scale(copy, configfile):
    config = yaml.safe_load((REPO / configfile).read_text())
    jobs = [(rule, res) for rule, res in dry_run_jobs(copy, configfile) if rule != "all"]
    assert jobs
    cap = config["max_job_minutes"]
    for rule, res in jobs:
        assert "mem_mb" in res and "runtime" in res, (rule, res)
        need = config["resources"][rule]
        # a training job asks for a run's memory for each run it trains at once (seeds_in_parallel)
        assert int(res["mem_mb"]) == need["mem_mb"] * int(res.get("seeds_at_once", 1)), rule
        runtime = int(res["runtime"])
        assert runtime <= cap and runtime % need["runtime"] == 0 or runtime == cap, (rule, runtime, need)


def test_every_rule_of_the_workflow_has_an_entry_in_every_scale():
    rules = subprocess.run([str(shutil.which("snakemake", path=str(REPO / ".venv" / "bin")) or "snakemake"), "--list-rules"],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    rules = set(rules) - {"all"}
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    assert set(schema["properties"]["resources"]["required"]) == rules
    for configfile in SCALES:
        assert set(yaml.safe_load((REPO / configfile).read_text())["resources"]) == rules, configfile


def test_a_scale_without_a_rules_needs_is_refused_before_any_job(copy):
    config = yaml.safe_load((REPO / "tests/configs/tiny.yaml").read_text())
    del config["resources"]["measure"]
    (copy / "missing.yaml").write_text(yaml.safe_dump(config))
    proc = snakemake(copy, "-n", "--configfile", "missing.yaml", check=False)
    assert proc.returncode != 0
    assert "'measure' is a required property" in proc.stdout + proc.stderr
