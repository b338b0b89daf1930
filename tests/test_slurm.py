"""profiles/slurm against a real Slurm: a one-node cluster on loopback (tests/slurm/one_node_slurm.sh)
runs a small tiny-scale pipeline, one classification and one translation table, to the report.
The node advertises GPUs as a count only, so the jobs ask for GPUs as at paper scale (one per
job, two per translation training run as torchrun ranks in one allocation) and run on the CPU.

Needs Debian's slurm packages or root to install them; skipped otherwise, unless
RESREPRO_REQUIRE_SLURM=1 (CI sets it), which turns the skip into a failure. Run with `make test-slurm`.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from test_workflow import BIN, COPIED, REPO, snakemake

pytestmark = pytest.mark.slurm
SCRIPT = REPO / "tests" / "slurm" / "one_node_slurm.sh"
TABLES = ["sas-fn1", "rskip-t5"]  # classification (2 rows) and translation (2 rows: train, average, evaluate)
TINY = yaml.safe_load((REPO / "tests" / "configs" / "tiny.yaml").read_text())
TRANSLATION_RUNS = 2 * TINY["translation"]["seeds"]  # rskip-t5: 2 cells x the tiny config's seeds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slurm_usable() -> str | None:
    """Why a one-node Slurm cannot be started here, or None."""
    if shutil.which("dpkg") is None:
        return "not a Debian system"
    installed = subprocess.run(["dpkg", "-s", "slurmctld", "slurmd", "slurm-client", "munge"], capture_output=True).returncode == 0
    if not installed and os.geteuid() != 0:
        return "Slurm packages missing and not root to install them"
    return None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """SLURM_CONF of a fresh one-node Slurm on free ports; stopped (only what it started) after."""
    if (why := slurm_usable()) is not None:
        if os.environ.get("RESREPRO_REQUIRE_SLURM") == "1":
            pytest.fail(f"RESREPRO_REQUIRE_SLURM=1 but {why}")
        pytest.skip(why)
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "SLURMCTLD_PORT": str(free_port()), "SLURMD_PORT": str(free_port())}
    up = subprocess.run([str(SCRIPT), "up", str(state)], env=env, capture_output=True, text=True)
    try:
        assert up.returncode == 0, f"one_node_slurm.sh up failed:\n{up.stdout}\n{up.stderr}"
        yield {"SLURM_CONF": str(state / "slurm.conf")}
    finally:
        subprocess.run([str(SCRIPT), "down", str(state)], capture_output=True)


@pytest.fixture(scope="module")
def limit_probes(cluster, tmp_path_factory):
    """Two jobs submitted before the pipeline (they end while it runs): one that holds more memory
    than it asked for, one that runs past its time. {probe: (job id, its output file)}."""
    out = tmp_path_factory.mktemp("probes")
    env = {**os.environ, **cluster}
    probes = {"memory": ["--mem=100M", "--time=2", "--wrap=python3 -c 'import time; x = b\"1\" * (400 << 20); time.sleep(30)'"],
              "time": ["--mem=100M", "--time=1", "--wrap=sleep 600"]}
    submitted = {}
    for name, args in probes.items():
        proc = subprocess.run([str(shutil.which("sbatch")), "--parsable", "-o", str(out / f"{name}.out"), *args],
                              env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        submitted[name] = (proc.stdout.strip().split(";")[0], out / f"{name}.out")
    return submitted


@pytest.fixture(scope="module")
def slurm_run(cluster, limit_probes, tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm_workflow")
    for item in COPIED:
        src = REPO / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / item)
    config = copy.deepcopy(TINY)
    config["tables"] = TABLES
    config["figures"] = ["sas-f3"]  # one measurement through Slurm; the papers' other figures add runs of their own
    config["gpus_per_job"] = 1
    config["translation"]["gpus"] = {"synthetic": 2}
    (root / "slurm.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, **cluster}
    # No accounting database on this cluster, so the plugin asks squeue (MinJobAge keeps finished
    # jobs listed); a real cluster's sacct needs neither option.
    proc = snakemake(root, "--profile", "profiles/slurm", "--configfile", "slurm.yaml",
                     "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "5",
                     "--slurm-keep-successful-logs", env=env)
    return root, proc, env


def job_state(job_id: str, env: dict) -> str:
    shown = subprocess.run([str(shutil.which("scontrol")), "show", "job", job_id], env=env, capture_output=True, text=True).stdout
    return re.search(r"JobState=(\w+)", shown).group(1)


def test_the_cluster_kills_a_job_over_its_memory_or_past_its_time(cluster, limit_probes, slurm_run):
    """What makes the rehearsal through Slurm (tests/test_rehearsal_run.py) a test of the scales'
    memory and runtime: a job that asks too little is killed here as on a cluster with cgroups."""
    env = {**os.environ, **cluster}
    deadline = time.time() + 240  # Slurm looks at time limits about every 30 s
    while (states := {name: job_state(job_id, env) for name, (job_id, _) in limit_probes.items()}) and time.time() < deadline:
        if not {"PENDING", "RUNNING", "COMPLETING"} & set(states.values()):
            break
        time.sleep(5)
    assert states["time"] == "TIMEOUT", states
    assert states["memory"] in ("FAILED", "OUT_OF_MEMORY", "CANCELLED"), states
    assert "exceeded memory limit" in limit_probes["memory"][1].read_text()


def test_pipeline_runs_to_the_report_through_slurm(slurm_run):
    root, _, _ = slurm_run
    html = (root / "report" / "tiny" / "index.html").read_text()
    for table_id in TABLES:
        assert f'id="{table_id}"' in html
    runs = (root / "results" / "tiny" / "aggregate" / "runs.csv").read_text().splitlines()
    assert len(runs) == 1 + 2 + TRANSLATION_RUNS  # header, sas-fn1's 2 runs, rskip-t5's runs


def slurm_logs(root: Path) -> dict[str, list[Path]]:
    logs: dict[str, list[Path]] = {}
    for path in (root / ".snakemake" / "slurm_logs").rglob("*.log"):
        rule = next(p for p in path.relative_to(root / ".snakemake" / "slurm_logs").parts if p.startswith("rule_"))
        logs.setdefault(rule.removeprefix("rule_"), []).append(path)
    return logs


def test_compute_rules_ran_as_slurm_jobs_and_local_rules_did_not(slurm_run):
    root, _, _ = slurm_run
    logs = slurm_logs(root)
    assert len(logs.get("train_classifier", [])) == 2 * 1  # sas-fn1: 2 cells x 1 seed
    for rule in ("train_translator", "evaluate_translation"):
        assert len(logs.get(rule, [])) == TRANSLATION_RUNS, (rule, logs.get(rule))
    for rule in ("prepare_digits", "synthesize_translation", "parameters", "aggregate"):
        assert len(logs.get(rule, [])) == 1, rule
    assert not {"plan", "checks", "judge", "report"} & set(logs)  # local rules: they run on the submitting host


def scontrol_job(root: Path, env: dict, rule: str) -> str:
    log = slurm_logs(root)[rule][0]
    job_id = re.match(r"(\d+)", log.stem).group(1)
    shown = subprocess.run([str(shutil.which("scontrol")), "show", "job", job_id], env=env, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


@pytest.mark.parametrize("rule, gpus", [("train_translator", 2), ("train_classifier", 1), ("evaluate_translation", 1)])
def test_jobs_got_their_gpus_cpus_memory_and_time(slurm_run, rule, gpus):
    """Each rule's needs (config resources, gpu) and the profile's cpus_per_gpu, nodes and tasks reached sbatch."""
    root, _, env = slurm_run
    shown = scontrol_job(root, env, rule)
    need = yaml.safe_load((REPO / "config" / "mini.yaml").read_text())["resources"][rule]
    assert f"TimeLimit={need['runtime'] // 60:02d}:{need['runtime'] % 60:02d}:00" in shown, shown
    assert re.search(rf"MinMemoryNode={need['mem_mb']}M\b", shown), shown
    assert re.search(rf"TresPerJob=(gres:)?gpu:{gpus}\b", shown), shown
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert f"NumCPUs={gpus * profile['set-resources'][rule]['cpus_per_gpu']}" in shown, shown
    # one node and one task: the command runs once and starts its torchrun ranks itself
    assert re.search(r"NumNodes=1\b", shown) and re.search(r"NumTasks=1\b", shown), shown
    assert "JobState=COMPLETED" in shown


def test_multi_gpu_training_ran_as_torchrun_ranks_in_one_job(slurm_run):
    root, _, _ = slurm_run
    jobs = list((root / "results" / "tiny" / "translation").rglob("trained.json"))
    assert len(jobs) == TRANSLATION_RUNS
    for job in jobs:
        assert "2 ranks" in (job.parent / "train.log").read_text()
        for seed in json.loads(job.read_text())["seeds"]:
            metrics = json.loads((job.parent.parent / f"seed{seed}" / "metrics.json").read_text())
            assert metrics["spec"]["world_size"] == 2


def test_a_second_run_through_slurm_submits_nothing(slurm_run):
    root, _, env = slurm_run
    again = snakemake(root, "--profile", "profiles/slurm", "--configfile", "slurm.yaml",
                      "--slurm-status-command", "squeue", "-n", env=env)
    assert "Nothing to be done" in again.stdout + again.stderr
