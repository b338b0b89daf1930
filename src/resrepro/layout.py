"""Where a scale's results live: the one module that builds and parses their paths.

    results/<scale>/
      <task>/<dataset>/<arch>/<recipe>/<variant_id>/   a cell: one configuration, at this scale
        seeds<first>[-<last>]/                         a job: the cell's seeds it trains (trained.json,
                                                       evaluated.json, its logs and benchmarks)
        seed<N>/                                       a run (metrics.json, eval.json, checkpoints/)
          measure/<measurement>.csv                    a measurement of the run
      plan.json                                        the resolved plan: tables, rows, figure cells, runs
      checks.json                                      and the rest of it: figures (their checks), claims
      aggregate/                                       the tidy tables of the aggregate (rows.csv, runs.csv,
                                                       ...) and of the judge (figure_checks.csv, claims.csv)

A cell, job or run path is relative to results/<scale>/: the stable layout people script against.
The rules' file patterns are the same paths with Snakemake wildcards (`job_file`, `run_file`).
"""

from __future__ import annotations

from pathlib import Path

RESULTS = "results"
CELL_PARTS = ("task", "dataset", "arch", "recipe", "variant_id")  # a cell path's folders, outermost first


def cell_path(task: str, dataset: str, arch: str, recipe: str, variant_id: str) -> str:
    """`arch` is the architecture's folder name at this scale (preact_resnet32), not its registry name."""
    return f"{task}/{dataset}/{arch}/{recipe}/{variant_id}"


def run_path(cell: str, seed: int) -> str:
    return f"{cell}/seed{seed}"


def job_path(cell: str, seeds: list[int]) -> str:
    """A job's folder names its cell's seeds as a range: consecutive ones, in order."""
    first, last = seeds[0], seeds[-1]
    if list(seeds) != list(range(first, last + 1)):
        raise ValueError(f"a job's seeds must be consecutive and in order, got {seeds}")
    return f"{cell}/seeds{first}" + (f"-{last}" if last != first else "")


def parse_run(run: str) -> dict:
    """A run path's parts: CELL_PARTS and its seed (an int)."""
    *cell, seed = run.split("/")
    if len(cell) != len(CELL_PARTS) or not seed.startswith("seed") or not seed[4:].isdigit():
        raise ValueError(f"not a run path (<task>/<dataset>/<arch>/<recipe>/<variant_id>/seed<N>): {run!r}")
    return {**dict(zip(CELL_PARTS, cell)), "seed": int(seed[4:])}


def seed_label(run: str) -> str:
    """The run's last folder, seed<N>: how a report row names each of its runs."""
    return run.rsplit("/", 1)[-1]


def cell_of(path: str | Path) -> str:
    """The cell of a job or run path (relative, or under results/<scale>/)."""
    return str(Path(path).parent)


def run_dir(cell_dir: str | Path, seed: int) -> Path:
    """A seed's run folder inside its cell's folder (a job's --cell-dir)."""
    return Path(run_path(str(cell_dir), seed))


def scale_dir(scale: str) -> str:
    return f"{RESULTS}/{scale}"


def plan_file(scale: str = "{scale}", name: str = "plan") -> str:
    """A file of the scale's resolved plan (experiments.PLAN_FILES): plan.json, which the aggregate
    reads, or checks.json, the figures' checks and the claims, which the judge reads."""
    return f"{scale_dir(scale)}/{name}.json"


def aggregate_file(name: str, scale: str = "{scale}") -> str:
    """A tidy table the aggregate writes (rows.csv, runs.csv, ...)."""
    return f"{scale_dir(scale)}/aggregate/{name}"


def job_file(name: str, task: str = "{task}", scale: str = "{scale}", job: str | None = None) -> str:
    """A job's file: a rule's pattern (wildcards), or one job's path when `job` is given."""
    job = job or f"{task}/{{dataset}}/{{arch}}/{{recipe}}/{{variant}}/seeds{{seeds}}"
    return f"{scale_dir(scale)}/{job}/{name}"


def run_file(name: str, scale: str = "{scale}", run: str | None = None) -> str:
    """A run's file: a rule's pattern (wildcards), or one run's path when `run` is given."""
    run = run or "{task}/{dataset}/{arch}/{recipe}/{variant}/seed{seed}"
    return f"{scale_dir(scale)}/{run}/{name}"


def measurement_file(measurement: str = "{measurement}", ext: str = "csv", scale: str = "{scale}", run: str | None = None) -> str:
    return run_file(f"measure/{measurement}.{ext}", scale, run)


def job_of_wildcards(task: str, wildcards) -> str:
    """The job path that a rule's wildcards name (the rule's task given)."""
    w = wildcards
    return f"{cell_path(task, w.dataset, w.arch, w.recipe, w.variant)}/seeds{w.seeds}"


def run_of_wildcards(wildcards) -> str:
    """The run path that a rule's wildcards name."""
    w = wildcards
    return run_path(cell_path(w.task, w.dataset, w.arch, w.recipe, w.variant), w.seed)
