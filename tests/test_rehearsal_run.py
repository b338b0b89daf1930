"""`resrepro rehearse` end to end (make test-rehearsal; CI): the paper scale's whole DAG on fake data in
the real formats, with every compute job refused the network, to a report of every table and figure.

In two phases in one folder: first the targets that run every rule once with the paper-size models
through profiles/slurm on a one-node Slurm that enforces the jobs' memory and time
(tests/slurm/one_node_slurm.sh), so that a rule of the rehearsal that asks too little fails here;
then the rest of the DAG locally, on what the first phase made, where each job's measured peak
(its benchmark file, or its log when it ran as a fork) must stay under what it asked. The workflow
is copied into a temporary folder, as the integration tests do."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_slurm import cluster, slurm_logs  # noqa: F401 (cluster: the one-node Slurm fixture)
from test_workflow import COPIED, REPO, planned_jobs

from resrepro import experiments
from resrepro.rehearsal import EVERY_RULE_ONCE

pytestmark = pytest.mark.rehearsal
BIN = Path(sys.executable).parent


def rehearse(root: Path, env: dict, *args: str, name: str) -> str:
    started = time.time()
    proc = subprocess.run([str(BIN / "resrepro"), "rehearse", *args], cwd=root, env=env, capture_output=True, text=True)
    print(f"rehearsal, {name}: {(time.time() - started) / 60:.1f} minutes")
    (root / f"rehearse-{name}.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def rehearsed(cluster, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("rehearsal")
    for item in COPIED:
        (shutil.copytree if (REPO / item).is_dir() else shutil.copy)(REPO / item, root / item)
    refused = root / "refused.log"
    env = {**os.environ, **cluster, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "RESREPRO_REFUSED_LOG": str(refused),
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "offline"), os.environ.get("PYTHONPATH", "")])}
    try:
        # no accounting database on this cluster: the plugin asks squeue (as tests/test_slurm.py does)
        slurm = rehearse(root, env, "--profile", "profiles/slurm", "--slurm-status-command", "squeue",
                         "--slurm-init-seconds-before-status-checks", "5", "--slurm-keep-successful-logs",
                         *EVERY_RULE_ONCE, name="slurm")
        local = rehearse(root, env, "--cores", "2", name="local")
        yield root, slurm + local
    finally:  # about 30 GB, mostly the big Transformer's checkpoints: not left in pytest's kept folders (logs and report stay)
        for folder in ("results", "resources"):
            shutil.rmtree(root / folder, ignore_errors=True)


def test_every_rule_of_the_paper_scale_ran(rehearsed):
    root, log = rehearsed
    ran = set(re.findall(r"^Finished jobid: \d+ \(Rule: (\w+)\)", log, re.M))
    assert ran == set(planned_jobs(root, "--configfile", "config/paper.yaml"))


def test_every_compute_rule_ran_through_slurm_within_the_memory_and_time_it_asked(rehearsed):
    """The first phase's jobs were Slurm jobs (a rule that asked too little would have been killed:
    tests/test_slurm.py shows the cluster kills them) and none was retried."""
    root, log = rehearsed
    slurm_log = (root / "rehearse-slurm.log").read_text()
    compute = set(planned_jobs(root, "--configfile", "config/paper.yaml")) - {"all", "aggregate", "judge", "report"}
    local_rules = {"download_cifar", "fetch_translation", "fetch_coco", "fetch_backbone", "gpu_hours", "plan", "checks"}
    assert set(slurm_logs(root)) == compute - local_rules
    assert set(re.findall(r"^Finished jobid: \d+ \(Rule: (\w+)\)", slurm_log, re.M)) == compute
    assert "Trying to restart job" not in slurm_log and "exceeded memory limit" not in slurm_log


def test_every_job_held_less_memory_than_its_scale_asks(rehearsed):
    """The local phase's jobs, the big Transformer's included, measured against config/rehearsal.yaml's
    mem_mb as benchmarks/pipeline_time.py reads them (Slurm enforced the first phase's)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import pipeline_time

    root, _ = rehearsed
    jobs = [job for log in sorted((root / ".snakemake" / "log").glob("*.snakemake.log"))
            for job in pipeline_time.with_benchmarks(pipeline_time.jobs_of(log.read_text()), root)]
    measured = [job for job in jobs if job["peak_mb"] is not None and job["asked_mb"] is not None]
    assert len(measured) > 200, len(measured)  # every compute job of the DAG
    over = [(job["rule"], job["output"], round(job["peak_mb"]), job["asked_mb"]) for job in measured if job["peak_mb"] > job["asked_mb"]]
    assert not over, over
    peaks = {row["rule"]: (round(row["peak_mb"]), row["asked_mb"]) for row in pipeline_time.memory(measured)}
    print("rehearsal peaks (MB held, MB asked):", peaks)


def test_the_report_holds_every_table_and_figure(rehearsed):
    root, _ = rehearsed
    html = (root / "report" / "rehearsal" / "index.html").read_text()
    config = yaml.safe_load((root / "config" / "rehearsal.yaml").read_text())
    plan = experiments.make_plan({**config, "download_urls": {}})
    for section in [*plan.tables, *plan.figures]:
        assert f'<section id="{section}">' in html, section
    assert "Ran at rehearsal scale" in html


def test_no_compute_job_used_the_network(rehearsed):
    root, _ = rehearsed
    refused = root / "refused.log"
    assert not refused.exists(), refused.read_text()


def test_the_hard_cases_of_the_real_data_were_met(rehearsed):
    root, _ = rehearsed
    downloads = root / "resources" / "rehearsal" / "downloads"
    fetch_log = (root / "logs" / "data" / "fetch_iwslt15_en_vi.log").read_text()
    assert re.search(r"train\.en: expected [\d,]+ bytes, received [\d,]+ \(resuming from there\)", fetch_log)  # cut short, resumed
    lock = json.loads((downloads / "checksums.lock.json").read_text())
    assert lock["iwslt15_en_vi/train.en"]["bytes"] == (root / "resources/rehearsal/mirror/iwslt15_en_vi/train.en").stat().st_size
    assert "wmt14_en_de/test-full.tgz" not in lock and "wmt14_en_de/training-parallel-europarl-v7.tgz" in lock  # pinned; first use
    dropped = [json.loads(p.read_text()).get("dropped_long_pairs", 0)
               for p in (root / "results" / "rehearsal" / "translation").glob("*/*/*/*/seed0/metrics.json")]
    assert dropped and min(dropped) >= 1  # the pairs over 256 subwords (one over 1,024) of every dataset
    coco = json.loads((root / "results" / "rehearsal" / "data" / "mscoco" / "prepared.json").read_text())
    assert len(coco["left_out"]) == 1  # the corrupt JPEG
