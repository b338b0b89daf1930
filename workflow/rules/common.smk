# Everything the rules need from config, computed once at parse time by the package.
# A bad config (unknown table or variant, wrong type, unmapped dataset) fails here, before any job.
import hashlib
import json
import os
from pathlib import Path

from resrepro import experiments, files, layout
from resrepro.data import backbones

PLAN = experiments.make_plan(config)
# What the analysis and the report read, resolved here once, by file (experiments.PLAN_FILES): files,
# not command-line arguments: the paper scale's plan is several times Linux's 128 KiB for one argument.
RESOLVED_PLAN = experiments.resolved_plan(PLAN, config)
PLAN_TEXTS = {name: json.dumps(experiments.plan_part(RESOLVED_PLAN, name), sort_keys=True) for name in experiments.PLAN_FILES}
if config["check_scorers"]:
    experiments.check_captioning_scorers(PLAN, config["java"])
# Downloads and prepared data, shared by the scales of real data; a scale of fake data has its own.
DOWNLOADS = config["downloads_dir"]
DATA = config["data_dir"]


wildcard_constraints:
    scale=config["scale"],
    dataset="[a-z0-9_]+",
    arch="[a-z0-9_]+",
    recipe="[a-z0-9_+-]+",
    seed="[0-9]+",
    seeds="[0-9]+(-[0-9]+)?",
    task="classification|translation|captioning",
    measurement="[a-z0-9_]+",


def report_target():
    return f"report/{config['scale']}/index.html"


def job_runs(task, wildcards):
    """The runs (experiments.Run) one training or evaluation job does, in seed order."""
    return [PLAN.runs[path] for path in PLAN.jobs[layout.job_of_wildcards(task, wildcards)]]


def run_spec(task):
    """The job's training spec (its cell's, without the seed) as JSON: the rule's params, so a
    changed value reruns it."""
    return lambda wildcards: experiments.job_train_spec(config, job_runs(task, wildcards)).to_json()


def eval_spec(task):
    """The job's evaluation spec (model identity, beam, alpha, length limits, average_last)."""
    return lambda wildcards: experiments.eval_spec(job_runs(task, wildcards)[0]).to_json()


def job_seeds(task):
    """The job's seeds, space-separated, for the command line."""
    return lambda wildcards: " ".join(str(run.seed) for run in job_runs(task, wildcards))


def cell_dir(wildcards, output):
    """The cell's folder (the job's output is <cell>/seeds<...>/<file>): seed<N>/ inside it holds each run."""
    return layout.cell_of(Path(output[0]).parent)


def single_gpu():
    """Classification and captioning training, and all evaluation: one GPU when the scale uses GPUs, else none."""
    return config["gpus_per_job"]


def training_gpus(task):
    """GPUs of one training job: translation's by dataset (translation.gpus), several running as
    torchrun ranks; the other tasks' one, or none."""
    if task == "translation":
        return lambda wildcards: experiments.gpus_for(config, job_runs(task, wildcards)[0])
    return single_gpu()


# Which ready job Snakemake starts first (higher first): data, which every training job waits on;
# the longest jobs (translation, captioning); then classification and the evaluations; the many
# short measurements last (0, the default), so that they fill the cores at the end instead of one
# training job running alone (docs/performance.md, session 24).
PRIORITY = {"data": 3, "long_training": 2, "training": 1, "evaluation": 1}


def needs(rule_name, key):
    """A rule's memory (mem_mb) or runtime (minutes) at this scale, from config `resources` (the
    schema requires every rule's)."""
    return config["resources"][rule_name][key]


def job_runtime(rule_name):
    """A one-run job's runtime (minutes); refused at parse if above max_job_minutes."""
    return experiments.job_minutes(config, rule_name)


def runtime_of_seeds(rule_name, task):
    """An evaluation job's runtime: the scale's minutes per run times the job's seeds."""
    return lambda wildcards: experiments.job_minutes(config, rule_name, len(job_runs(task, wildcards)))


def seeds_at_once(task):
    """How many of a training job's seeds train side by side (seeds_in_parallel, at most the job's)."""
    return lambda wildcards: experiments.seeds_at_once(config, task, len(job_runs(task, wildcards)))


def memory_of_training(rule_name, task):
    """A training job's memory: the memory per run times the seeds it trains at once (processes)."""
    at_once = seeds_at_once(task)
    return lambda wildcards: experiments.job_memory(config, rule_name, at_once(wildcards))


def runtime_of_training(rule_name, task):
    """A training job's runtime: the minutes per run times the rounds its seeds take, side by side,
    at most max_job_minutes (the run then continues in the next job)."""
    return lambda wildcards: experiments.job_minutes(config, rule_name, experiments.training_rounds(config, task, len(job_runs(task, wildcards))))


def training_retries(rule_name, task):
    """A training rule's retries: the jobs its longest run continues in, and those asked for failures
    (--retries; None keeps them as asked when no run needs a next job)."""
    rounds = [experiments.training_rounds(config, task, len(runs)) for runs in PLAN.jobs.values() if PLAN.runs[runs[0]].task == task]
    continued = experiments.continuations(config, rule_name, rounds)
    settings = workflow.execution_settings  # None while linting
    return continued + (settings.retries if settings else 0) if continued else None


# The rules of each task (their names key config `resources` and the Slurm profile): its training,
# its evaluation after training (none for classification: its training evaluates every epoch), and
# its training's priority.
TASKS = {
    "classification": {"train": "train_classifier", "evaluate": None, "priority": PRIORITY["training"]},
    "translation": {"train": "train_translator", "evaluate": "evaluate_translation", "priority": PRIORITY["long_training"]},
    "captioning": {"train": "train_captioner", "evaluate": "evaluate_captioning", "priority": PRIORITY["long_training"]},
}


def prepared_data(wildcards):
    return f"{DATA}/{wildcards.dataset}.pt"


def task_data(task):
    """A task's prepared data, as a rule's input: a classification dataset is one file, the others' a folder (its prepared.json)."""
    return prepared_data if task == "classification" else f"{DATA}/{{dataset}}/prepared.json"


def data_argument(task):
    """The prepared data as its job's --data: the file, or the folder its prepared.json marks."""
    return lambda wildcards, input: input.data if task == "classification" else str(Path(input.data).parent)


def all_run_results(wildcards):
    """What the aggregate waits for: every training job, and each translation and captioning job's
    evaluation (it reads each run's seed<N>/ folder). With `partial: true` only the jobs that
    finished, so a report shows what finished and lists the rest."""
    out = []
    for job, runs in PLAN.jobs.items():
        out.append(layout.job_file("trained.json", scale=wildcards.scale, job=job))
        if TASKS[PLAN.runs[runs[0]].task]["evaluate"]:
            out.append(layout.job_file("evaluated.json", scale=wildcards.scale, job=job))
    if config["partial"]:
        out = [f for f in out if os.path.exists(f)]
    return out


def measured_job(wildcards):
    """The training job of a measured run: measuring waits for it."""
    return layout.job_file("trained.json", scale=wildcards.scale, job=PLAN.job_of(layout.run_of_wildcards(wildcards)))


def measured_run_dir(wildcards):
    """The measured run's folder."""
    return f"{layout.scale_dir(wildcards.scale)}/{layout.run_of_wildcards(wildcards)}"


def measured_data(wildcards):
    """The prepared data a measured run was trained on."""
    if wildcards.task == "classification":
        return prepared_data(wildcards)
    return f"{DATA}/{wildcards.dataset}/prepared.json"


def measure_settings(wildcards):
    """The measurement's settings (the figure's), JSON: the rule's params, so a change remeasures."""
    run = layout.run_of_wildcards(wildcards)
    return json.dumps(experiments.measure_settings(PLAN, run, wildcards.measurement), sort_keys=True)


def all_measurements(wildcards):
    """Every measurement the selected figures and measured table rows read, one CSV per run and
    measurement. With `partial: true` only those that exist now."""
    out = sorted({layout.measurement_file(name, scale=wildcards.scale, run=run) for run, name, _, _ in experiments.measured(PLAN)})
    if config["partial"]:
        out = [f for f in out if os.path.exists(f)]
    return out


def results_dir(wildcards):
    return layout.scale_dir(wildcards.scale)


def plan_digest(name):
    """The hash of a plan file's text: its rule's param, so that a change to it writes the file again."""
    return hashlib.sha256(PLAN_TEXTS[name].encode()).hexdigest()


def write_plan(name, path, log):
    files.write_text(path, PLAN_TEXTS[name])
    counts = {"plan": f"{len(PLAN.rows)} table rows, {len(PLAN.measures)} figure cells, {len(PLAN.runs)} runs in {len(PLAN.jobs)} jobs",
              "checks": f"{len(PLAN.all_figures)} figures, claims from {RESOLVED_PLAN['claims_source'] or 'no file'}"}
    files.write_text(log, f"{path}: {counts[name]}\n")


def table_files():
    return [str(p) for p in experiments.table_files(config["tables_dir"])]


def translation_mirror(wildcards):
    """A mirror base URL from config (download_urls: {iwslt15_en_vi: URL}) or "" for the official one."""
    return config.get("download_urls", {}).get(wildcards.dataset, "")


def coco_features():
    """How the MSCOCO features are made (captioning.features): the kind, and its backbone or TSV files."""
    return config["captioning"].get("features", {"kind": "grid"})


def bottom_up_files(wildcards):
    """Anderson et al.'s TSV files when the features are bottom-up: inputs, so that a missing one stops the run here."""
    features = coco_features()
    return features.get("tsv", []) if features["kind"] == "bottom_up" else []


def backbone_weights(wildcards):
    """The grid backbone's weight file, an input so that fetch_backbone downloads it before the GPU
    job starts; none for bottom-up features or a backbone without weights."""
    features = coco_features()
    path = backbones.weights_path(features.get("backbone"), f"{DOWNLOADS}/backbones") if features["kind"] == "grid" else None
    return [str(path)] if path else []


def download_url(wildcards):
    """A mirror from config (download_urls: {cifar10: URL}) or "" for the official URL."""
    return config.get("download_urls", {}).get(wildcards.name, "")


def report_recipe():
    """The scale's recipe, shown in the report's header."""
    tasks = {table["task"] for table in PLAN.tables.values()}
    recipe = {t: dict(config[t]) for t in sorted(tasks)}
    recipe["seeds"] = {"default": config["seeds"], **config.get("table_seeds", {})}
    return json.dumps(recipe, sort_keys=True)


def extra_sources(download):
    """The extra sources (config download_mirrors) of one download's files as JSON {file name: [URL]}."""
    return json.dumps(experiments.download_mirrors(config, download), sort_keys=True)


def pinned_md5(download):
    """The md5 pins (config download_md5) of one download's files as JSON {file name: md5}: a
    param, so a new pin verifies again."""
    return json.dumps(experiments.download_md5(config, download), sort_keys=True)
