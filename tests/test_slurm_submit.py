"""The sbatch call profiles/slurm makes for a paper-scale 4-GPU translation job, without a cluster.

Slurm's commands are stand-ins on PATH: `sinfo` names a default partition "gpu", `sacct` fails (no
account is guessed) and `sbatch` records its arguments and refuses the job. The call must ask for
4 GPUs on one node with one task (no --ntasks-per-gpu: the job starts its torchrun ranks itself),
and the README shows exactly this call, so a user can check it before spending an allocation.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap

import pytest
import yaml

from test_workflow import BIN, COPIED, REPO

pytestmark = pytest.mark.integration

# SAS Table 3's WMT EN-DE base run (refinement sas-wmt: 4 GPUs x 6,250 tokens)
TARGET = "results/paper/translation/wmt14_en_de/transformer_base/sas-wmt/sas-bias_a0-bias_b0/seeds1/trained.json"
STUBS = {
    "sbatch": 'echo "sbatch $*" >> "$(dirname "$0")/sbatch_calls"; cat > /dev/null; exit 1',
    "sinfo": 'printf "PARTITION\\ngpu*\\n"',
    "sacct": "exit 1",
}


def shown_in_readme(call: str, workdir) -> str:
    """The call as the README prints it: up to the wrapped Snakemake command, with this run's job
    name and folder replaced by placeholders, one option per line."""
    call = call.split(" --wrap=")[0]
    call = re.sub(r"--job-name \S+", "--job-name <run uuid>", call).replace(str(workdir), "<workdir>")
    return " \\\n    ".join(re.split(r"\s+(?=-)", call.strip()))


@pytest.fixture(scope="module")
def sbatch_call(tmp_path_factory) -> tuple[str, object]:
    workdir = tmp_path_factory.mktemp("submit")
    for item in COPIED:
        (shutil.copytree if (REPO / item).is_dir() else shutil.copy)(REPO / item, workdir / item)
    (workdir / "results" / "data" / "wmt14_en_de").mkdir(parents=True)
    (workdir / "results" / "data" / "wmt14_en_de" / "prepared.json").write_text("{}")  # as if prepared
    stubs = workdir / "stubs"
    stubs.mkdir()
    for name, body in STUBS.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([str(BIN / "snakemake"), "--profile", "profiles/slurm", "--configfile", "config/paper.yaml",
                           "--retries", "0", "--slurm-init-seconds-before-status-checks", "1", TARGET], cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0  # the stand-in sbatch refused the job
    calls = (stubs / "sbatch_calls").read_text().splitlines()
    assert len(calls) == 1, proc.stderr[-3000:]
    return calls[0], workdir


def test_a_four_gpu_translation_job_asks_for_one_node_and_one_task(sbatch_call):
    call, _ = sbatch_call
    options = call.split(" --wrap=")[0].split()
    need = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())["resources"]["train_translator"]
    assert "--gpus=4" in options and "--nodes=1" in options and "--cpus-per-gpu=4" in options
    assert not [o for o in options if "ntasks" in o]  # one task: the command runs once and starts 4 ranks
    assert f"-t {need['runtime']}" in call and f"--mem {need['mem_mb']}" in call and "-p gpu" in call
    assert "--target-jobs 'train_translator:scale=paper,dataset=wmt14_en_de" in call


def test_the_readme_shows_this_call(sbatch_call):
    call, workdir = sbatch_call
    shown = shown_in_readme(call, workdir)
    assert shown in (REPO / "README.md").read_text(), "README.md should show:\n" + textwrap.indent(shown, "    ")
