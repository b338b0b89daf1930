# Everything the rules need from config, computed once at parse time by the package.
# A bad config (unknown table or variant, wrong type, unmapped dataset) fails here, before any job.
import json
from pathlib import Path

from resrepro import experiments

PLAN = experiments.make_plan(config)
SCALE = config["scale"]
RESULTS = f"results/{SCALE}"
RUN_DIR = RESULTS + "/{task}/{dataset}/{arch}/{variant}/seed{seed}"


wildcard_constraints:
    task="|".join(experiments.TASKS),
    dataset="[a-z0-9]+",
    arch="[a-z_]+[0-9]+",
    seed="[0-9]+",


def report_target():
    return f"report/{SCALE}/index.html"


def run_key(wildcards):
    return f"{wildcards.task}/{wildcards.dataset}/{wildcards.arch}/{wildcards.variant}/seed{wildcards.seed}"


def train_spec(wildcards):
    """The run's full spec as JSON: the train rule's params, so a changed value reruns it."""
    run = PLAN.runs[run_key(wildcards)]
    return json.dumps(experiments.train_spec(config, run), sort_keys=True)


def prepared_data(wildcards):
    return f"results/data/{wildcards.dataset}.pt"


def all_run_metrics():
    return [f"{RESULTS}/{path}/metrics.json" for path in PLAN.runs]


def aggregate_plan():
    return json.dumps(PLAN.rows, sort_keys=True)


def table_files():
    return sorted(str(p) for p in Path(config["tables_dir"]).glob("*.yaml"))


def download_url(wildcards):
    """A mirror from config (download_urls: {cifar10: URL}) or the official URL."""
    return config.get("download_urls", {}).get(wildcards.name, "")


def report_recipe():
    tasks = {table["task"] for table in PLAN.tables.values()}
    recipe = {t: {k: v for k, v in config[t].items()} for t in sorted(tasks)}
    recipe["seeds"] = {"default": config["seeds"], **config.get("table_seeds", {})}
    return json.dumps(recipe, sort_keys=True)
