"""benchmarks/gpu_rehearsal.py, the rehearsal on a lent GPU: its targets run every rule once, its
Snakemake command line parses as meant, and its summary counts what the log says ran."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_rehearsal  # noqa: E402

BIN = ROOT / ".venv" / "bin"


@pytest.mark.integration
def test_the_covering_targets_run_every_rule_but_those_that_need_the_whole_dag(tmp_path):
    """A dry run of the cover phase's own command line (less `rehearse`'s mirror, stood in for by
    empty files): --config and --resources must not swallow the targets, no job asks for two GPUs,
    every rule appears."""
    from test_rehearsal import mirror_stand_ins
    from test_workflow import COPIED

    for item in COPIED:
        (shutil.copytree if (ROOT / item).is_dir() else shutil.copy)(ROOT / item, tmp_path / item)
    mirror_stand_ins(tmp_path)
    argv = gpu_rehearsal.command(cover=True, cores=16, python="py")
    snakemake_args = argv[argv.index("rehearse") + 1:]
    proc = subprocess.run([str(BIN / "snakemake"), "-n", "--forceall", "--configfile", "config/rehearsal.yaml", *snakemake_args],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    rules = set(line.split()[0] for line in proc.stdout.split("Job stats:")[1].split("total")[0].splitlines()[3:] if line.strip())
    listed = subprocess.run([str(BIN / "snakemake"), "--list-rules", "--configfile", "config/rehearsal.yaml"], cwd=tmp_path,
                            capture_output=True, text=True).stdout.split()
    paper = subprocess.run([str(BIN / "snakemake"), "-n", "--forceall", "--configfile", "config/paper.yaml"], cwd=tmp_path,
                           capture_output=True, text=True).stdout
    paper_rules = set(line.split()[0] for line in paper.split("Job stats:")[1].split("total")[0].splitlines()[3:] if line.strip())
    assert paper_rules - {"aggregate", "judge", "report", "all"} <= rules <= set(listed)
    assert "gpu=2" not in proc.stdout and "gpu=1" in proc.stdout


def test_job_counts_read_finished_and_failed_jobs_per_rule():
    log = "\n".join(["Finished jobid: 3 (Rule: measure)", "Finished jobid: 4 (Rule: measure)", "Error in rule evaluate_captioning:",
                     "Finished jobid: 9 (Rule: train_translator)", "rule measure:"])
    finished, failed = gpu_rehearsal.job_counts(log)
    assert finished == {"measure": 2, "train_translator": 1} and failed == {"evaluate_captioning": 1}


def test_a_run_past_its_deadline_is_stopped_and_says_so(tmp_path):
    how, seconds = gpu_rehearsal.run([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"],
                                     deadline_s=1, log_path=tmp_path / "log")
    assert how.startswith("stopped at its deadline") and seconds < 30
    assert (tmp_path / "log").read_text() == "started\n"


def test_the_prediction_measures_the_rehearsals_keys_as_it_ran_on_the_gpu_and_holds_each_phases_jobs_against_them(tmp_path, monkeypatch):
    """--predict: the rehearsal's config with the GPU's --config over it (a mapping merged into a
    mapping, as Snakemake merges), its step times measured on that config, then pipeline_time's
    --predict on each phase's Snakemake log with the fake data's folder."""
    import json
    from types import SimpleNamespace

    import yaml

    config = tmp_path / "rehearsal.yaml"
    config.write_text(yaml.safe_dump({"gpus_per_job": 0, "check_scorers": True, "data_dir": "results/rehearsal/data",
                                      "translation": {"max_updates": 10, "gpus": {"wmt14_en_de": 2, "wmt14_en_fr": 2}}}))
    ran = gpu_rehearsal.gpu_config(config)
    assert ran == {"gpus_per_job": 1, "check_scorers": False, "data_dir": "results/rehearsal/data",
                   "translation": {"max_updates": 10, "gpus": {"wmt14_en_de": 1, "wmt14_en_fr": 1}}}
    monkeypatch.setattr(gpu_rehearsal, "gpu_config", lambda: ran)
    budgets, figures = [], []
    monkeypatch.setattr(gpu_rehearsal, "run", lambda argv, deadline_s, log_path: budgets.append(argv) or ("ok", 12.0))
    monkeypatch.setattr(gpu_rehearsal.subprocess, "run", lambda argv, **kw: figures.append(argv) or SimpleNamespace(stdout="held", stderr=""))
    for phase in ("cover", "all"):
        (tmp_path / f"rehearsal-{phase}.snakemake.log").write_text("")
    said = gpu_rehearsal.predict(tmp_path, deadline_s=300)
    assert json.loads((tmp_path / "rehearsal-gpu.yaml").read_text()) == ran
    [budget] = budgets
    assert budget[budget.index("--config") + 1] == str(tmp_path / "rehearsal-gpu.yaml") and "*/nondeterministic" in budget
    assert budget[budget.index("--data-dir") + 1] == "results/rehearsal/data"  # batches shaped as the fake data
    assert [argv[argv.index("--log") + 1] for argv in figures] == [str(tmp_path / f"rehearsal-{p}.snakemake.log") for p in ("all", "cover")]
    predicted = figures[0][figures[0].index("--predict"):]
    assert predicted == ["--predict", str(tmp_path / "rehearsal-gpu.yaml"), str(tmp_path / "rehearsal-steps.yaml"), "--data-dir",
                         "results/rehearsal/data"]
    assert said.startswith("step times of the rehearsal's keys on this GPU: ok, 12 s") and said.count("held") == 2
