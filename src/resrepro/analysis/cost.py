"""GPU-hours of a scale's tables, from step times measured (or estimated) on a named GPU.

A step-times file (config/costs/*.yaml, written by benchmarks/gpu_budget.py) holds one training
step's milliseconds per key `task/arch/variant/batch` (`step_key`): a classification step is one
batch of `batch_size` images; a translation step is one batch of `max_tokens` tokens on one GPU;
a captioning step is one batch of `batch_size` captions, and a self-critical update (`scst` in
the recipe) one batch of `batch_images` images, each captioned greedily and by sampling
(`scst_key`).
The file names its device and its basis: `measured` (on that device, by gpu_budget.py) or
`estimate` (with the measurements it extrapolates from), and the one session its times come
from: the `commit` the code was at and the `date`. Times of two sessions (another commit, another
day, another machine) are not comparable, so a file holds one session's: a file naming several
commits or dates is refused, and gpu_budget.py re-measures keys into a file only in its session.

A run's GPU-hours are its steps times the step time times the GPUs it holds: classification
`epochs x ceil(train images / batch_size)` steps on one GPU; translation `max_updates x
update_freq` batches on each of its GPUs; captioning the same, plus its self-critical updates.
Beyond its steps, a run holds its GPUs while it writes checkpoints and, on several GPUs, while
they all-reduce its gradients (`overhead_hours`): those count where the step-times file has the
machine's figures for them (`checkpoint_write_gb_s`, measured; `allreduce_bus_gb_s`, with its
`allreduce_source`), and the report says which count. Classification evaluates the test set after
every epoch, in batches of `eval_batch_size` images: `epochs x ceil(test images / batch)`
evaluation batches at the key `eval_key`'s milliseconds, counted where the file has evaluation
times (gpu_budget.py measures them beside the steps); a translation run's dev loss at each
checkpoint (`dev_key`), where the file has its time. So do each job's start (`job_start_s`, once
a job, by the GPUs it holds) and each run's model build and first steps beyond their step time
(`warmup_s`: compiling). Beam search, captioning's evaluation and data preparation are left out.
A run alone on its GPU takes the GPU's whole time; the runs of a job that share their GPU
(`sharing`) take the step times measured so, per run, and, where the file has none, the time
alone: an upper bound, which the report says. The recipes' deterministic kernels cost what the
file's `/nondeterministic` keys say: one key per task timed with them off (`switch_keys`), which
prices the scale without them (`deterministic_text`). A table's cost is that of its runs (a run
that two tables share counts in both); a scale's total counts each run of its tables once.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import yaml

from ..catalog import ConfigError
from ..evaluate.classification import eval_batch_size
from ..experiments import Plan, Run, gpus_for, make_plan, seeds_at_once
from ..recipes import RESUME_EVERY_S
from .disk import weight_bytes, written_files

# Training examples per dataset that classification costs epochs in (Krizhevsky 2009: CIFAR-10 and
# CIFAR-100 have 50,000 training images each; digits: data/digits.py's split).
TRAIN_EXAMPLES = {"cifar10": 50_000, "cifar100": 50_000, "digits": 1_297}
# ... and test images, which classification evaluates after every epoch (Krizhevsky 2009: 10,000 each)
TEST_EXAMPLES = {"cifar10": 10_000, "cifar100": 10_000, "digits": 500}
BASES = ("measured", "estimate")
STEP_TIMES_KEYS = ("device", "basis", "commit", "date", "source", "step_ms")
NONDETERMINISTIC = "/nondeterministic"  # a step key timed with its recipe's deterministic kernels off


def precision_suffix(recipe: dict) -> str:
    """A float64 run's keys end in /float64 (paper 002's equivalent training), others in nothing."""
    return "/float64" if recipe.get("dtype") == "float64" else ""


def step_key(run: Run) -> str:
    recipe = json.loads(run.recipe_json)
    batch = {"classification": f"batch{recipe.get('batch_size')}", "captioning": f"captions{recipe.get('batch_size')}"}.get(
        run.task, f"tokens{recipe.get('max_tokens')}")
    return f"{run.task}/{run.arch_dir}/{run.variant_id}/{batch}{precision_suffix(recipe)}"


def images(run: Run, split: str, examples: dict[str, tuple[int, int]] | None = None) -> int:
    """A classification dataset's images in `split` ("training" or "test"): `examples`' (dataset ->
    (training, test), for data of other sizes, as the rehearsal's fake copies), else the real ones'."""
    known = {dataset: (TRAIN_EXAMPLES[dataset], TEST_EXAMPLES[dataset]) for dataset in TRAIN_EXAMPLES} | (examples or {})
    if run.dataset not in known:
        raise ConfigError(f"cost: the number of {split} images of {run.dataset!r} is unknown; known: {', '.join(known)}")
    return known[run.dataset][split == "test"]


def steps_of(run: Run, examples: dict[str, tuple[int, int]] | None = None) -> int:
    """Training steps of one run on each of its GPUs (see the module docstring; `examples` as for `images`)."""
    recipe = json.loads(run.recipe_json)
    if run.task == "classification":
        return recipe["epochs"] * math.ceil(images(run, "training", examples) / recipe["batch_size"])
    return recipe["max_updates"] * recipe["update_freq"]


def eval_key(run: Run) -> str | None:
    """The key of a classification run's evaluation batch (`eval_batch_size` test images, forward
    only); None for the other tasks, whose evaluation is not costed."""
    if run.task != "classification":
        return None
    recipe = json.loads(run.recipe_json)
    return f"{run.task}/{run.arch_dir}/{run.variant_id}/eval{eval_batch_size(recipe['batch_size'])}{precision_suffix(recipe)}"


def eval_batches_of(run: Run, examples: dict[str, tuple[int, int]] | None = None) -> int:
    """Evaluation batches of a classification run: the test set after each epoch."""
    recipe = json.loads(run.recipe_json)
    return recipe["epochs"] * math.ceil(images(run, "test", examples) / eval_batch_size(recipe["batch_size"]))


def is_eval_key(key: str) -> bool:
    """Whether a key of a step-times file is an evaluation's (`eval_key`, with its suffixes)."""
    parts = key.split("/")
    return len(parts) > 3 and parts[3].startswith("eval")


def times_evaluation(step_ms: dict[str, float]) -> bool:
    """Whether a step-times file has evaluation times."""
    return any(map(is_eval_key, step_ms))


def eval_hours(run: Run, step_ms: dict[str, float], gpus: int, share: str = "", examples: dict[str, tuple[int, int]] | None = None) -> float:
    """A classification run's evaluation batches times the evaluation time (`share` as for its
    steps, where the file has the evaluation measured so), times its GPUs; 0 for the other tasks."""
    key = eval_key(run)
    if key is None:
        return 0.0
    if key + share in step_ms:
        key += share
    if key not in step_ms:
        raise ConfigError(f"cost: no evaluation time for {key}; the file times evaluation for other runs: measure every key "
                          "in one session (`benchmarks/gpu_budget.py --device cuda`)")
    return eval_batches_of(run, examples) * step_ms[key] * max(gpus, 1) / 3.6e6


def dev_pairs(run: Run) -> int | None:
    """The dev pairs a translation run's dev loss reads at each checkpoint: the recipe's
    `dev_sentences`, at most its dev split's; else the whole split (data/translation.py's line
    counts; None for a corpus without them)."""
    from ..data.translation import SOURCES

    whole = sum(corpus.lines or 0 for corpus in SOURCES[run.dataset].dev) if run.dataset in SOURCES else 0
    first = json.loads(run.recipe_json).get("dev_sentences")
    if first and whole:
        return min(first, whole)
    return first or whole or None


def dev_key(run: Run) -> str | None:
    """The key of a translation run's dev loss over `dev_pairs` pairs (train/translation.py's
    `dev_loss`); None for the other tasks and for a dev split of unknown size."""
    pairs = dev_pairs(run) if run.task == "translation" else None
    return f"{run.task}/{run.arch_dir}/{run.variant_id}/dev{pairs}" if pairs else None


def dev_hours(run: Run, step_ms: dict[str, float], gpus: int) -> float:
    """A translation run's dev losses, one at each checkpoint (every `checkpoint_every` updates
    and at the last), times the dev-loss time, times its GPUs; 0 where the file has no time for
    its key (the report says translation's dev loss is left out)."""
    key = dev_key(run)
    if key is None or key not in step_ms:
        return 0.0
    recipe = json.loads(run.recipe_json)
    return math.ceil(recipe["max_updates"] / recipe["checkpoint_every"]) * step_ms[key] * max(gpus, 1) / 3.6e6


def times_dev_loss(step_ms: dict[str, float]) -> bool:
    """Whether a step-times file has dev-loss times."""
    return any(len(key.split("/")) > 3 and key.split("/")[3].startswith("dev") for key in step_ms)


def scst_key(run: Run) -> str | None:
    """The step key of a captioning run's self-critical updates; None without them."""
    scst = json.loads(run.recipe_json).get("scst")
    return f"{run.task}/{run.arch_dir}/{run.variant_id}/scst{scst['batch_images']}" if scst else None


def stages_of(run: Run, examples: dict[str, tuple[int, int]] | None = None) -> list[tuple[str, int]]:
    """(step key, steps) of each stage of a run's training: the run's steps; then, for a
    captioning run with `scst`, its self-critical updates."""
    stages = [(step_key(run), steps_of(run, examples))]
    if key := scst_key(run):
        stages.append((key, json.loads(run.recipe_json)["scst"]["updates"]))
    return stages


def load_step_times(path: str | Path) -> dict:
    """A step-times file: device, basis (measured | estimate), the session's commit and date,
    source, step_ms {key: ms}. A file of several sessions is refused (module docstring)."""
    data = yaml.safe_load(Path(path).read_text())
    for key in STEP_TIMES_KEYS:
        if key not in data:
            raise ConfigError(f"{path}: missing key {key!r}")
    if data["basis"] not in BASES:
        raise ConfigError(f"{path}: basis must be one of {', '.join(BASES)}, got {data['basis']!r}")
    for key in ("device", "commit", "date"):
        if isinstance(data[key], (list, dict)):
            raise ConfigError(f"{path}: {key} names {len(data[key])} values: step times of several sessions do not compare; "
                              "measure every key in one session (benchmarks/gpu_budget.py --device cuda --out FILE)")
    starts = data.get("job_start_s")
    if starts is not None and not (isinstance(starts, dict) and all(isinstance(gpus, int) and gpus >= 0 for gpus in starts)):
        raise ConfigError(f"{path}: job_start_s must give a job's start in seconds by the GPUs it holds (0: the CPU), "
                          f"got {starts!r}; measure it again (benchmarks/gpu_budget.py)")
    return {**data, "date": str(data["date"])}


def sharing(config: dict, plan: Plan) -> dict[str, str]:
    """Per run, how it shares its GPU with the other runs of its job, as the suffix of its step
    keys: "" alone (or one after another), "/processes{P}" for `seeds_in_parallel` (P side by
    side, each its own process), "/stacked{K}" for `seeds_stacked` (a classification job's K runs
    as one program). A shared key's time is one run's part of the GPU: the job's step over its runs."""
    out = {}
    for runs in plan.jobs.values():
        for path in runs:
            together = len(runs)
            if config.get("seeds_stacked") and plan.runs[path].task == "classification" and together > 1:
                out[path] = f"/stacked{together}"
            elif (side_by_side := seeds_at_once(config, plan.runs[path].task, together)) > 1:
                out[path] = f"/processes{side_by_side}"
            else:
                out[path] = ""
    return out


def measured_share(run: Run, share: str, step_ms: dict[str, float]) -> str:
    """`share` where the file has every stage of the run measured so, else "" (costed alone)."""
    return share if all(key + share in step_ms for key, _ in stages_of(run)) else ""


def sharing_text(shares: set[str], unmeasured: set[str] = frozenset()) -> str:
    """How a scale's runs hold their GPUs, in words, for the report; `unmeasured` the shares
    costed alone for want of step times measured so."""
    def words(share: str) -> str:
        if share.startswith("/processes"):
            said = f"{share.removeprefix('/processes')} runs a GPU as processes"
        elif share.startswith("/stacked"):
            said = f"{share.removeprefix('/stacked')} runs a GPU stacked as one program"
        else:
            return "each run alone on its GPUs"
        return said + (" (costed alone: no step times measured so, an upper bound)" if share in unmeasured else "")

    return "; ".join(map(words, sorted(shares)))


def trains_deterministic(run: Run) -> bool:
    """Whether the run's recipe turns on deterministic kernels (devices.use_deterministic_algorithms)."""
    return bool(json.loads(run.recipe_json).get("deterministic"))


def switch_keys(plan: Plan) -> dict[str, str]:
    """Per task, the step key that its tabled runs with deterministic kernels take the most
    training steps of (the first in plan order among equals): where the deterministic switch is
    timed, as that key + NONDETERMINISTIC with the kernels off (benchmarks/gpu_budget.py)."""
    steps: dict[str, dict[str, int]] = {}
    for run in tabled_runs(plan).values():
        if trains_deterministic(run):
            by_key = steps.setdefault(run.task, {})
            by_key[step_key(run)] = by_key.get(step_key(run), 0) + steps_of(run)
    return {task: max(by_key, key=by_key.get) for task, by_key in steps.items()}


def switch_ratios(plan: Plan, step_ms: dict[str, float]) -> dict[str, tuple[str, float]]:
    """Per task whose switch key (`switch_keys`) the file has timed both ways: (the key, its step's
    time with deterministic kernels off over its time with them on)."""
    return {task: (key, step_ms[key + NONDETERMINISTIC] / step_ms[key]) for task, key in switch_keys(plan).items()
            if key in step_ms and key + NONDETERMINISTIC in step_ms}


def hours_without_deterministic(plan: Plan, step_ms: dict[str, float], step_hours: dict[str, float], total: float) -> float:
    """A scale's GPU-hours (`total`) with its deterministic kernels off: each deterministic run's
    training steps (`step_hours`, by run path) at its task's `switch_ratios` (measured on one run
    alone), the rest as it is; a task without a ratio stays at its cost with them on."""
    runs, ratios = tabled_runs(plan), switch_ratios(plan, step_ms)
    return total - math.fsum(hours * (1 - ratios[runs[path].task][1]) for path, hours in step_hours.items()
                             if trains_deterministic(runs[path]) and runs[path].task in ratios)


def deterministic_text(plan: Plan, step_ms: dict[str, float], step_hours: dict[str, float], total: float) -> str:
    """What a scale's deterministic kernels do and cost, in words, for the report: the tasks that
    train with them; per task, its switch key's step off over on; and the scale's GPU-hours
    without them (`hours_without_deterministic`) beside `total`."""
    runs = tabled_runs(plan)
    tasks = list(dict.fromkeys(run.task for run in runs.values() if trains_deterministic(run)))
    if not tasks:
        return "off: torch's fastest kernels"
    said = (f"on for {_listed(tasks)}, so that a seed gives the same numbers on the same GPU and software, and a resumed "
            "run those of an unbroken one")
    ratios = switch_ratios(plan, step_ms)
    if not ratios:
        return said + "; their cost is not in this step-times file (benchmarks/gpu_budget.py times the keys ending /nondeterministic)"
    said += "; off, a step takes " + ", ".join(f"{ratio:.2f}x its time at {key}" for key, ratio in ratios.values())
    without = hours_without_deterministic(plan, step_ms, step_hours, total)
    said += f", and the scale would take about {without:,.1f} GPU-hours, not {total:,.1f} (each task's training steps at its key's ratio)"
    if unmeasured := [task for task in tasks if task not in ratios]:
        said += f"; {_listed(unmeasured)} at their cost with them on (not timed off in this step-times file)"
    return said


def _listed(words: list[str]) -> str:
    return ", ".join(words[:-1]) + f" and {words[-1]}" if len(words) > 1 else words[0]


def load_scale(path: str | Path) -> tuple[dict, Plan]:
    """A scale profile (config/paper.yaml, ...) as written, and its plan: what is costed."""
    config = yaml.safe_load(Path(path).read_text())
    return config, make_plan(config)


def run_gpu_hours(run: Run, step_ms: dict[str, float], gpus: int, share: str = "", examples: dict[str, tuple[int, int]] | None = None) -> float:
    """Each training stage's steps times its step time (`share`: as the run shares its GPU, see
    `sharing`), times the GPUs the run holds."""
    stages = [(key + share, steps) for key, steps in stages_of(run, examples)]
    for key, _ in stages:
        if key not in step_ms:
            how = (f"; its job shares a GPU ({share.lstrip('/')}): measure the shared step's time per run "
                   "(gpu_budget.py measures the keys of a config whose jobs share GPUs, or --stacked K)" if share else "")
            raise ConfigError(f"cost: no step time for {key}; measure it with `benchmarks/gpu_budget.py --device cuda` "
                              f"(or add it to the estimate){how}")
    return sum(steps * step_ms[key] for key, steps in stages) * max(gpus, 1) / 3.6e6


def checkpoint_seconds(run: Run, step_ms: dict[str, float], share: str = "") -> float | None:
    """The seconds of training between two checkpoints of a translation or captioning run:
    `checkpoint_every` updates at its step time (`share` as for its steps), and its dev loss where
    the file times it; None for classification (a checkpoint every epoch) and without a step time."""
    key = step_key(run) + share
    if run.task == "classification" or key not in step_ms:
        return None
    recipe = json.loads(run.recipe_json)
    batches = recipe["checkpoint_every"] * recipe["update_freq"] * step_ms[key] * runs_at_once(share)
    return (batches + step_ms.get(dev_key(run) or "", 0.0)) / 1000


def overhead_hours(run: Run, config: dict, step_times: dict, copies: dict[str, float] | None, gpus: int,
                   share: str = "") -> dict[str, float]:
    """GPU-hours the run holds its GPUs beyond its steps, for what the step-times file has figures
    of: "warmup", its model's build and its stages' first steps beyond their step time
    (`warmup_s`: compiling, cuDNN's first calls), its part where runs start side by side (`share`,
    see `sharing`); "checkpoints", the bytes of the files it writes while training
    (disk.written_files, its resume points by its `checkpoint_seconds`; each file a measured
    number of weight copies, `copies`) at `checkpoint_write_gb_s` (rank 0 writes, the other ranks
    wait); "allreduce", for a run on G > 1 GPUs, each update's ring all-reduce of its
    float32 gradients, 2 (G - 1) / G of their bytes at `allreduce_bus_gb_s` (NCCL's bus
    bandwidth): an upper bound, as DDP overlaps it with the backward pass."""
    out = {}
    size = None
    if warmups := [step_times["warmup_s"][key] for key, _ in stages_of(run) if key in step_times.get("warmup_s", {})]:
        out["warmup"] = sum(warmups) * max(gpus, 1) / runs_at_once(share) / 3600
    if "checkpoint_write_gb_s" in step_times and copies is not None:
        size = weight_bytes(run, config)
        checkpoint_s = checkpoint_seconds(run, step_times["step_ms"], measured_share(run, share, step_times["step_ms"]))
        written = sum(count * copies[f"{run.task}/{kind}"] * size for kind, count in written_files(run, checkpoint_s).items())
        out["checkpoints"] = written / (step_times["checkpoint_write_gb_s"] * 1e9) * max(gpus, 1) / 3600
    if "allreduce_bus_gb_s" in step_times and gpus > 1:
        size = size or weight_bytes(run, config)
        updates = json.loads(run.recipe_json)["max_updates"]
        per_update = 2 * (gpus - 1) / gpus * size / (step_times["allreduce_bus_gb_s"] * 1e9)
        out["allreduce"] = updates * per_update * gpus / 3600
    return out


def job_start_s(step_times: dict, gpus: int) -> float | None:
    """The seconds a job on `gpus` GPUs (0: the CPU) takes to start, from the file's `job_start_s`
    (seconds by the GPUs a job holds: `resrepro launch --gpus G -- devices` timed, the launcher and
    its ranks each importing torch and starting its device), at `start_measured_on`; None where
    the file has no start."""
    starts = step_times.get("job_start_s")
    return starts[start_measured_on(starts, gpus)] if starts else None


def start_measured_on(starts: dict[int, float], gpus: int) -> int:
    """The GPUs whose measured start a job on `gpus` takes: its own; else (the measuring machine
    had fewer) the most measured below; else the fewest measured."""
    fewer = [measured for measured in starts if measured <= gpus]
    return max(fewer) if fewer else min(starts)


def gpus_text(gpus: int) -> str:
    return "the CPU" if gpus == 0 else f"{gpus} GPU" + ("s" if gpus > 1 else "")


def runs_at_once(share: str) -> int:
    """How many runs of a job share its GPU at once, from its keys' suffix (`sharing`)."""
    return int(share.removeprefix("/processes").removeprefix("/stacked")) if share else 1


def run_hours(plan: Plan, config: dict, step_times: dict, copies: dict[str, float] | None = None,
              examples: dict[str, tuple[int, int]] | None = None, timed_only: bool = False) -> dict[str, dict[str, float]]:
    """Per tabled run (by path), its GPU-hours by part: "steps" (`run_gpu_hours`, at the steps
    measured as it shares its GPU where the file has them, else alone), "evaluation" (`eval_hours`,
    where the file times evaluation), the overheads the file has figures for (`overhead_hours`),
    and "start", its part of its job's start (`job_start_s`: the launcher and the job's ranks
    importing torch and starting their devices, once a job, shared by the job's runs). `examples`
    as for `images`; with `timed_only`, only the runs whose steps the file times (a file stopped
    part way), else a run without them is refused (`run_gpu_hours`)."""
    runs, shares = tabled_runs(plan), sharing(config, plan)
    step_ms = step_times["step_ms"]
    job_runs = {path: len(members) for members in plan.jobs.values() for path in members}
    out = {}
    for path, run in runs.items():
        if timed_only and not all(key in step_ms for key, _ in stages_of(run)):
            continue
        gpus, share = gpus_for(config, run), shares.get(path, "")
        parts = {"steps": run_gpu_hours(run, step_ms, gpus, measured_share(run, share, step_ms), examples)}
        if times_evaluation(step_ms):
            parts["evaluation"] = eval_hours(run, step_ms, gpus, share, examples)
        if dev := dev_hours(run, step_ms, gpus):
            parts["dev loss"] = dev
        parts |= overhead_hours(run, config, step_times, copies, gpus, share)
        if (start := job_start_s(step_times, gpus)) is not None:
            parts["start"] = start * max(gpus, 1) / job_runs.get(path, 1) / 3600
        out[path] = parts
    return out


def job_seconds(plan: Plan, config: dict, step_times: dict, copies: dict[str, float] | None = None,
                examples: dict[str, tuple[int, int]] | None = None) -> dict[str, float]:
    """The wall seconds the model gives each training job whose runs are all tabled and timed: its runs'
    GPU-hours (`run_hours`) over the GPUs each holds (runs side by side take their part of one
    GPU each, so their parts add up to the job's time). What a pipeline's measured job times are
    held against (benchmarks/pipeline_time.py --predict)."""
    hours = run_hours(plan, config, step_times, copies, examples, timed_only=True)
    return {job: math.fsum(sum(hours[path].values()) * 3600 / max(gpus_for(config, plan.runs[path]), 1) for path in members)
            for job, members in plan.jobs.items() if all(path in hours for path in members)}


def counted_text(step_times: dict, copies: dict | None, multi_gpu: bool, job_gpus: frozenset[int] = frozenset()) -> tuple[str, str]:
    """(what a scale's GPU-hours count, what they leave out), in words, for the report; `job_gpus`
    the GPUs its jobs hold (a job's start is measured per number of GPUs)."""
    counted, left = ["training steps"], []
    if times_evaluation(step_times["step_ms"]):
        counted.append("classification's test evaluation after every epoch")
    else:
        left.append("classification's evaluation (the step-times file has no evaluation times)")
    if times_dev_loss(step_times["step_ms"]):
        counted.append("translation's dev loss at each checkpoint")
    else:
        left.append("translation's dev loss (the step-times file has no dev-loss times)")
    left.append("beam search and captioning's evaluation")
    left.append("data preparation")
    if starts := step_times.get("job_start_s"):
        unmeasured = ", ".join(f"a job on {gpus_text(gpus)} as on {gpus_text(start_measured_on(starts, gpus))}"
                               for gpus in sorted(job_gpus - starts.keys()))
        counted.append("each job's start (its launcher and ranks importing torch and starting their devices: "
                       + ", ".join(f"{gpus_text(gpus)} {seconds:g} s" for gpus, seconds in sorted(starts.items()))
                       + (f"; {unmeasured}: not measured" if unmeasured else "") + ")")
    else:
        left.append("each job's start (the step-times file has no start time)")
    if "warmup_s" in step_times:
        counted.append("each run's model build and first steps beyond their step time (compiling)")
    else:
        left.append("each run's model build and first steps beyond their step time (the step-times file has no warm-up times)")
    if "checkpoint_write_gb_s" in step_times and copies is not None:
        counted.append(f"checkpoint writes at {step_times['checkpoint_write_gb_s']:g} GB/s (a translation or captioning run's "
                       f"resume point at most every {RESUME_EVERY_S / 60:g} minutes of training)")
    else:
        left.append("checkpoint writes (the step-times file has no write bandwidth)")
    if multi_gpu:
        if "allreduce_bus_gb_s" in step_times:
            counted.append(f"the gradients' all-reduce at {step_times['allreduce_bus_gb_s']:g} GB/s bus bandwidth "
                           f"({step_times.get('allreduce_source', 'source not given')}; an upper bound: DDP overlaps it with backward)")
        else:
            left.append("the all-reduce of multi-GPU runs (the step-times file has no bus bandwidth)")
    return "; ".join(counted), ", ".join(left)


def tabled_runs(plan: Plan) -> dict[str, Run]:
    """The runs that the plan's tables name, in plan order: what a scale's cost counts."""
    return {path: plan.runs[path] for path in dict.fromkeys(run for row in plan.rows for run in row["runs"])}


def table_costs(plan: Plan, config: dict, step_times: dict, copies: dict[str, float] | None = None,
                examples: dict[str, tuple[int, int]] | None = None) -> pd.DataFrame:
    """Per table of `plan`: its runs, seeds (the most of any row), GPU-hours in all and per seed;
    then a row `total` over every run of the scale once. A run's hours are the sum of its parts
    (`run_hours`; `copies`, disk.yaml's, for the checkpoints; `examples` as for `images`). Each
    row names the scale, what its hours count and leave out, how its runs share their GPUs, what
    its deterministic kernels cost (`deterministic_text`), and the step times' device, basis,
    commit and date. Runs that only figures name (paper 003's nets) are not costed: the step-time
    files hold the tables' architectures only."""
    runs, shares = tabled_runs(plan), sharing(config, plan)
    costed_as = {path: measured_share(run, shares.get(path, ""), step_times["step_ms"]) for path, run in runs.items()}
    parts = run_hours(plan, config, step_times, copies, examples)
    step_hours = {path: part["steps"] for path, part in parts.items()}
    hours = {path: math.fsum(part.values()) for path, part in parts.items()}
    by_table: dict[str, dict] = {}
    for row in plan.rows:
        entry = by_table.setdefault(row["table"], {"runs": set(), "seeds": 0})
        entry["runs"].update(row["runs"])
        entry["seeds"] = max(entry["seeds"], len(row["runs"]))
    out = []
    for table, entry in by_table.items():
        total = math.fsum(hours[r] for r in entry["runs"])  # exact: the set's order changes from process to process
        out.append({"table": table, "runs": len(entry["runs"]), "seeds": entry["seeds"], "gpu_hours": total,
                    "gpu_hours_per_seed": total / max(entry["seeds"], 1)})
    out.append({"table": "total", "runs": len(hours), "seeds": max((e["seeds"] for e in by_table.values()), default=0),
                "gpu_hours": math.fsum(hours.values()), "gpu_hours_per_seed": float("nan")})
    frame = pd.DataFrame(out)
    frame.insert(0, "scale", config["scale"])
    job_gpus = frozenset(gpus_for(config, run) for run in runs.values())
    frame["counts"], frame["leaves_out"] = counted_text(step_times, copies, max(job_gpus, default=0) > 1, job_gpus)
    frame["sharing"] = sharing_text({shares.get(path, "") for path in runs},
                                    {shares.get(path, "") for path in runs if costed_as[path] != shares.get(path, "")})
    frame["deterministic"] = deterministic_text(plan, step_times["step_ms"], step_hours, math.fsum(hours.values()))
    for key in ("device", "basis", "commit", "date", "source"):
        frame[key] = step_times[key]
    return frame


def estimate_step_ms(run: Run, anchors: dict, key: str | None = None) -> float:
    """A step time extrapolated from a few measured anchors (config/costs/*-anchors.yaml):
    classification, the baseline's ms at two or more depths at `batch_size`, linear in depth between
    and beyond them; translation, the baseline's ms per size at `tokens` tokens, scaled up in
    proportion above that batch (below it a GPU step is bound by kernel launches, not tokens);
    captioning, the baseline's ms per size at `captions` captions, scaled up in proportion above it;
    all times the variant's ratio to the baseline (`ratio`, by variant name, else `other`), and a
    float64 run's times the anchors' `float64_ratio`. `key` a run's self-critical stage
    (`scst_key`): captioning's `scst` anchors, the baseline's ms at `images` images, likewise."""
    task = anchors[run.task]
    recipe = json.loads(run.recipe_json)
    if key is not None and key == scst_key(run):
        scst = task["scst"]
        base = scst["baseline_ms"][str(run.size)] * max(1.0, recipe["scst"]["batch_images"] / scst["images"])
        return base * scst["ratio"].get(run.variant, scst["ratio"]["other"])
    if run.task == "classification":
        depths = sorted((int(d), ms) for d, ms in task["baseline_ms"].items())
        (d0, ms0), (d1, ms1) = depths[0], depths[-1]  # one anchor: the same step time at every depth
        slope = (ms1 - ms0) / (d1 - d0) if d1 != d0 else 0.0
        base = (ms0 + slope * (int(run.size) - d0)) * recipe["batch_size"] / task["batch_size"]
    elif run.task == "captioning":
        base = task["baseline_ms"][str(run.size)] * max(1.0, recipe["batch_size"] / task["captions"])
    else:
        base = task["baseline_ms"][str(run.size)] * max(1.0, recipe["max_tokens"] / task["tokens"])
    precision = anchors.get("float64_ratio", 1.0) if recipe.get("dtype") == "float64" else 1.0
    return base * task["ratio"].get(run.variant, task["ratio"]["other"]) * precision
