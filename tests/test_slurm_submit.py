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


def with_stand_ins(workdir) -> tuple[object, dict]:
    """The workflow copied into `workdir`, and Slurm's stand-in commands on the PATH of the env returned."""
    for item in COPIED:
        (shutil.copytree if (REPO / item).is_dir() else shutil.copy)(REPO / item, workdir / item)
    stubs = workdir / "stubs"
    stubs.mkdir()
    for name, body in STUBS.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}"}
    return stubs, env


@pytest.fixture(scope="module")
def sbatch_call(tmp_path_factory) -> tuple[str, object]:
    workdir = tmp_path_factory.mktemp("submit")
    (workdir / "results" / "data" / "wmt14_en_de").mkdir(parents=True)
    (workdir / "results" / "data" / "wmt14_en_de" / "prepared.json").write_text("{}")  # as if prepared
    stubs, env = with_stand_ins(workdir)
    proc = subprocess.run([str(BIN / "snakemake"), "--profile", "profiles/slurm", "--configfile", "config/paper.yaml",
                           "--retries", "0", "--slurm-init-seconds-before-status-checks", "1", TARGET], cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0  # the stand-in sbatch refused the job
    calls = (stubs / "sbatch_calls").read_text().splitlines()
    # 72 hours at 24 a job: the run's retries (continuations) resubmit the refused job, the same call
    assert len(calls) == 3 and len({re.sub(r"--job-name \S+", "", c.split(" --wrap=")[0]) for c in calls}) == 1, proc.stderr[-3000:]
    return calls[0], workdir


def test_a_four_gpu_translation_job_asks_for_one_node_and_one_task(sbatch_call):
    call, _ = sbatch_call
    options = call.split(" --wrap=")[0].split()
    need = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())["resources"]["train_translator"]
    assert "--gpus=4" in options and "--nodes=1" in options and "--cpus-per-gpu=4" in options
    assert not [o for o in options if "ntasks" in o]  # one task: the command runs once and starts 4 ranks
    assert need["runtime"] == 4320 and "-t 1440 " in call and f"--mem {need['mem_mb']}" in call and "-p gpu" in call
    assert " --no-requeue " in call
    assert "--target-jobs 'train_translator:scale=paper,dataset=wmt14_en_de" in call


def test_the_readme_shows_this_call(sbatch_call):
    call, workdir = sbatch_call
    shown = shown_in_readme(call, workdir)
    assert shown in (REPO / "README.md").read_text(), "README.md should show:\n" + textwrap.indent(shown, "    ")


def paper_plan():
    """The paper scale's plan (config/paper.yaml): which runs each training job trains."""
    from resrepro import experiments

    return experiments.make_plan(yaml.safe_load((REPO / "config" / "paper.yaml").read_text()) | {"download_urls": {}})


LOCAL_RULES = {"download_cifar", "fetch_translation", "fetch_coco", "fetch_backbone", "gpu_hours", "plan", "checks", "judge", "report"}


def first_outputs(workdir, env) -> dict[str, list[str]]:
    """Each rule's outputs in the paper scale's dry run, in its order."""
    out = subprocess.run([str(BIN / "snakemake"), "-n", "--configfile", "config/paper.yaml"], cwd=workdir, env=env,
                         capture_output=True, text=True, check=True).stdout
    outputs: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        if (rule := re.match(r"(?:local)?rule (\w+):", block)) and (found := re.search(r"^\s+output: (\S+)", block, re.M)):
            outputs.setdefault(rule.group(1), []).append(found.group(1))
    return outputs


def touch(workdir, *paths: str) -> None:
    for path in paths:
        (workdir / path).parent.mkdir(parents=True, exist_ok=True)
        (workdir / path).write_text("{}")


@pytest.fixture(scope="module")
def every_rules_call(tmp_path_factory) -> dict[str, list[str]]:
    """The sbatch calls of the jobs of every rule that is not local, at paper scale: prepare_coco on its
    own (its output is the captioner's input), the rest together, each with its inputs in place."""
    workdir = tmp_path_factory.mktemp("every_rule")
    stubs, env = with_stand_ins(workdir)
    outputs = first_outputs(workdir, env)

    def submit(*args: str) -> None:
        subprocess.run([str(BIN / "snakemake"), "--profile", "profiles/slurm", "--configfile", "config/paper.yaml", "--retries", "0",
                        "--slurm-init-seconds-before-status-checks", "1", *args], cwd=workdir, env=env, capture_output=True, text=True,
                       timeout=600)

    touch(workdir, "resources/mscoco/fetched.json", *[p for p in outputs["fetch_backbone"]])
    # the parameter counts, after rule plan (local) has written the plan; then in place, so that the aggregate is submitted
    submit(outputs["prepare_coco"][0], "results/data/digits.pt", "results/data/synthetic/prepared.json", "results/data/scenes/prepared.json",
           "results/paper/aggregate/parameters.csv")
    touch(workdir, "results/paper/aggregate/parameters.csv")
    # Data in place (cifar10, IWSLT, WMT EN-DE, COCO); cifar100's and EN-FR's to prepare. Then, newer,
    # the training jobs whose evaluation or measurement is asked for.
    touch(workdir, "resources/cifar100-python.tar.gz", "resources/wmt14_en_fr/fetched.json", "results/data/cifar10.pt",
          *[f"results/data/{d}/prepared.json" for d in ("iwslt15_en_vi", "wmt14_en_de", "mscoco")])
    def on_data_in_place(paths: list[str]) -> list[str]:
        return [p for p in paths if re.search(r"/(cifar10|iwslt15_en_vi|wmt14_en_de|mscoco)/", p)]

    evaluated = {rule: on_data_in_place(outputs[rule])[-1] for rule in ("evaluate_translation", "evaluate_captioning")}
    measured = on_data_in_place(outputs["measure"])[0]
    measured_job = f"results/paper/{paper_plan().job_of(re.sub(r'^results/paper/|/measure/.*$', '', measured))}/trained.json"
    done = {*[p.replace("evaluated.json", "trained.json") for p in evaluated.values()], measured_job}
    touch(workdir, *done)
    trained = {rule: next(p for p in on_data_in_place(outputs[rule]) if p not in done and (rule != "train_classifier" or "/seeds0-3/" in p))
               for rule in ("train_classifier", "train_translator", "train_captioner")}  # a CIFAR job of 4 runs side by side
    submit("--config", "partial=true", "--", "results/data/cifar100.pt", "results/data/wmt14_en_fr/prepared.json", *trained.values(),
           *evaluated.values(), measured, "results/paper/aggregate/rows.csv")
    calls = {}
    for call in (stubs / "sbatch_calls").read_text().splitlines():
        rule = re.search(r"--comment rule_(\w+?)_wildcards|--comment rule_(\w+)", call)
        calls.setdefault(rule.group(1) or rule.group(2), []).append(call)
    return calls


def test_every_rule_that_is_not_local_is_submitted_with_its_scales_needs(every_rules_call):
    rules = set(yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())["properties"]["resources"]["required"])
    assert set(every_rules_call) == rules - LOCAL_RULES
    config = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    runs_at_once = set()
    for rule, call in ((rule, call) for rule, calls in every_rules_call.items() for call in calls):
        options = call.split(" --wrap=")[0]
        need = config["resources"][rule]
        # a training job asks for a run's memory for each run it trains at once (its seeds, the last wildcard: 4 of a CIFAR cell)
        seeds = re.search(r" --comment rule_train_\S+?_(\d+)-(\d+) ", call)
        at_once = int(seeds.group(2)) - int(seeds.group(1)) + 1 if seeds else 1
        assert f" --mem {need['mem_mb'] * at_once} " in options, (rule, at_once, options)
        runs_at_once.add((rule, at_once))
        assert f" -t {min(need['runtime'], config['max_job_minutes'])} " in options, (rule, options)
        assert " --no-requeue" in options, (rule, options)  # Snakemake retries; Slurm must not run a second copy
        assert "ntasks-per-gpu" not in options and re.findall(r"--ntasks=(\d+)", options) in ([], ["1"]), (rule, options)  # one task
        gpus = re.search(r"--gpus=(\d+)", options)
        if rule in ("prepare_coco", "train_classifier", "train_translator", "train_captioner", "evaluate_translation",
                    "evaluate_captioning", "measure"):
            assert gpus and "--nodes=1" in options and "--cpus-per-gpu=4" in options, (rule, options)
        else:
            assert gpus is None, (rule, options)
    assert ("train_classifier", 4) in runs_at_once
