"""The GPU-hours of every table of a scale: step times of each architecture, size and variant at
the scale's batch, measured on this device (or estimated from measured anchors), times each run's
steps (resrepro.analysis.cost).

Measure on a GPU (writes the step-times file the report reads, then prints each table's cost):

    .venv/bin/python benchmarks/gpu_budget.py --device cuda --out config/costs/h100.yaml

and point `gpu_costs` in config/*.yaml at it. The file names the device, the commit and the date:
one session's times (analysis/cost.py refuses a file of several). Within that session (same device,
commit and day) a step can be measured again, keeping the file's other step times:

    .venv/bin/python benchmarks/gpu_budget.py --device cuda --keys '*/sas*' --out config/costs/h100.yaml

After a change to the code, measure every step again, into the file or a new one.

Without a GPU, the estimate from measured anchors:

    .venv/bin/python benchmarks/gpu_budget.py --estimate config/costs/h100-anchors.yaml --out config/costs/h100-estimate.yaml

Each distinct step (task, architecture and size, variant, batch) of the configs is measured once:
a model built as training builds it, with the recipe's speed switches and deterministic mode as
the training loop resolves them on the device, `--warmup` untimed steps, then the median of
`--steps` timed steps (forward, loss, backward, optimizer step; synchronised). Classification
steps take random CIFAR-shaped batches of `batch_size`; translation steps random batches of
`max_tokens` tokens in sentences of 25 source and 25 target tokens, vocabulary 32,768 (with
`--data-dir`, batches shaped as the prepared data there: `prepared_data`). Each
classification run's evaluation batch (the test set's, after every epoch) is timed the same way,
under its own key (cost.eval_key): the evaluation the loop runs, forward only, uncompiled; and
each translation run's dev loss at a checkpoint (cost.dev_key: the loop's `dev_loss`). Where a
scale's jobs train P runs side by side (seeds_in_parallel), their keys `.../processes{P}` are timed
last, by P processes stepping together (`--skip '*/processes*'` leaves them for a later call with
`--keys '*/processes*'` into the same file, in the same session). The deterministic kernels'
cost: per task of a scale, the key its deterministic runs take the most steps of is timed again
with them off, as `.../nondeterministic` (cost.switch_keys), after the other keys alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import fnmatch
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from resrepro import experiments
from resrepro.analysis import cost
from resrepro.specs import ClassificationTrainSpec, TrainSpec

ROOT = Path(__file__).resolve().parents[1]


def distinct_steps(configs_and_plans, stacked: tuple[int, ...] = (), evaluation: bool = False,
                   switched: bool = False) -> dict[str, tuple[dict, experiments.Run]]:
    """One (config, run) per step key of the tables' runs (cost.tabled_runs), in plan order; for
    a config whose jobs stack their runs (cost.sharing), the stacked keys too, and with `stacked`
    each classification key stacked K for each K given (what stacking would cost, measured beside
    the keys alone). With `evaluation`, each classification run's evaluation key (cost.eval_key)
    after its steps', stacked likewise, and each translation run's dev-loss key (cost.dev_key). A
    config whose jobs train their runs side by side as processes adds those keys
    (`/processes{P}`), timed with P processes at once. With `switched`,
    each task's switch key with deterministic kernels off (cost.switch_keys, `/nondeterministic`)."""
    steps = {}
    for config, plan in configs_and_plans:
        shares = cost.sharing(config, plan)
        for key in cost.switch_keys(plan).values() if switched else ():
            run = next(run for run in cost.tabled_runs(plan).values() if cost.step_key(run) == key)
            steps.setdefault(key + cost.NONDETERMINISTIC, (config, run))
        for path, run in cost.tabled_runs(plan).items():
            evaluated = [(key, 0) for key in (cost.eval_key(run), cost.dev_key(run)) if evaluation and key]
            for key, _ in cost.stages_of(run) + evaluated:
                steps.setdefault(key, (config, run))
                if shares.get(path, ""):
                    steps.setdefault(key + shares[path], (config, run))
                for k in stacked if run.task == "classification" else ():
                    steps.setdefault(f"{key}/stacked{k}", (config, run))
    return steps


def runs_sharing(key: str, how: str) -> int:
    """K of a key ending in /{how}{K} (cost.sharing; `how`: "stacked" as one program, "processes"
    side by side); 1 for a run alone."""
    last = key.rsplit("/", 1)[-1]
    return int(last.removeprefix(how)) if last.startswith(how) else 1


@dataclasses.dataclass(frozen=True)
class StepData:
    """What a timed step's random batch looks like: the real datasets' shapes (`real_data`), or
    those of the prepared data a run trains on (`prepared_data`)."""

    image: tuple[int, int, int] = (3, 32, 32)  # classification: an image's channels, height, width
    classes: int = 10
    vocab: int = 32_768  # translation: subword pieces; captioning: words
    length: int = 25  # translation: tokens a sentence, each side; captioning: words a caption
    regions: int = 49  # captioning: feature vectors an image
    feature_dim: int = 2_050


def real_data(run: experiments.Run) -> StepData:
    """The real datasets' shapes: CIFAR's 32 x 32 colour images (10 or 100 classes); WMT's 32,768
    pieces in sentences of 25 (each side); MSCOCO's 9,571 words (min count 5) in captions of 12 words
    over a 7 x 7 grid of 2,048 + 2 values (data/coco.py)."""
    if run.task == "captioning":
        return StepData(vocab=9_571, length=12)
    return StepData(classes=100 if run.dataset == "cifar100" else 10)


def prepared_data(run: experiments.Run, data_dir: Path) -> StepData:
    """The shapes of the data the run trains on, from its prepared files under `data_dir` (the
    pipeline's data_dir): a classification dataset's images and classes (<dataset>.pt); a
    translation corpus's pieces (subword.vocab) and mean sentence length over both sides (the
    encoded training ids); a captioning set's words (prepared.json), regions and feature values
    (train.features.npy) and mean caption length."""
    import json

    import numpy as np

    if run.task == "classification":
        from resrepro.data.images import load_prepared

        data = load_prepared(data_dir / f"{run.dataset}.pt")
        return StepData(image=tuple(data["train_x"].shape[1:]), classes=len(data["classes"]))
    folder = data_dir / run.dataset
    if run.task == "translation":
        vocab = len((folder / "subword.vocab").read_text().splitlines())
        sides = [np.load(folder / f"train.{side}.offsets.npy") for side in ("src", "tgt")]
        return StepData(vocab=vocab, length=max(1, round(sum(int(o[-1] - o[0]) for o in sides) / sum(len(o) - 1 for o in sides))))
    meta = json.loads((folder / "prepared.json").read_text())
    _, regions, dim = np.load(folder / "train.features.npy", mmap_mode="r").shape
    captions = [caption for image in json.loads((folder / "train.captions.json").read_text()) for caption in image["captions"]]
    return StepData(vocab=meta["vocab_size"], length=max(1, round(sum(len(c.split()) for c in captions) / len(captions))),
                    regions=regions, feature_dim=dim)


def classifier(spec: ClassificationTrainSpec, device, speed, data: StepData):
    """A classification run's model built as training builds it (the registry, the data's
    channels and classes), on `device` in the run's dtype and layout."""
    from resrepro import models

    return speed.place(models.build(models.model_spec(spec, classes=data.classes, in_channels=data.image[0])), device)


def training_step(spec: TrainSpec, device, data: StepData = StepData(), stacked: int = 1):
    """One training step of the run `spec` names, on random data shaped as `data`, as training
    runs it: the model built through the registry, the recipe's speed switches resolved for
    `device`, the recipe's optimizer. Classification: a batch of `batch_size` images;
    translation: `max_tokens` tokens in sentences of `length` + `length`; captioning:
    `batch_size` captions of `length` words over `regions` feature vectors. With `stacked` K, a
    classification step of K runs stacked as one program, as train/stacked.py trains a job's
    seeds (a batch each). The step ends with a host sync (as the training loops' divergence check
    does), so wall-clock timing is honest on a GPU."""
    import torch
    from torch.nn import functional as F

    from resrepro import models
    from resrepro.models.transformer import label_smoothed_loss
    from resrepro.speed import speed_of

    torch.manual_seed(0)
    if spec.task == "classification" and stacked > 1:
        from resrepro.models.stacked import StackedRuns

        speed = speed_of(spec, device, image_model=True).stacked()
        model = StackedRuns([classifier(spec, device, speed, data) for _ in range(stacked)])
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, **speed.optimizer_options())
        x = torch.randn(stacked, spec.batch_size, *data.image, device=device).to(speed.dtype)
        y = torch.randint(0, data.classes, (stacked, spec.batch_size), device=device)

        def loss_of():  # each run's mean loss, summed: a run's gradient is its own loss's
            return F.cross_entropy(net(x).float().flatten(0, 1), y.flatten(), reduction="none").view(stacked, -1).mean(1).sum()
    elif spec.task == "classification":
        speed = speed_of(spec, device, image_model=True)
        model = classifier(spec, device, speed, data)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, **speed.optimizer_options())
        x = speed.layout(torch.randn(spec.batch_size, *data.image, device=device))
        y = torch.randint(0, data.classes, (spec.batch_size,), device=device)

        def loss_of():
            return F.cross_entropy(net(x).float(), y)
    elif spec.task == "captioning":
        speed = speed_of(spec, device)
        vocab, words, regions, dim = data.vocab, data.length, data.regions, data.feature_dim
        model = models.build(models.model_spec(spec, vocab_size=vocab, feature_dim=dim)).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, **speed.optimizer_options())
        feats = torch.randn(spec.batch_size, regions, dim, device=device)
        words_in = torch.randint(4, vocab, (spec.batch_size, words + 1), device=device)

        def loss_of():
            return label_smoothed_loss(net(feats, words_in), words_in, 0, spec.label_smoothing)
    else:
        speed = speed_of(spec, device)
        vocab, length = data.vocab, data.length
        model = models.build(models.model_spec(spec, vocab_size=vocab)).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, **speed.optimizer_options())
        n = max(1, spec.max_tokens // (length + 1))
        src = torch.randint(4, vocab, (n, length + 1), device=device)
        tgt = torch.randint(4, vocab, (n, length + 1), device=device)

        def loss_of():
            return label_smoothed_loss(net(src, tgt), tgt, 0, 0.1)
    # a compiled model compiles in its warm-up steps; a stack compiles as train/stacked.py compiles it
    net = (model.compile(**speed.compile_options()) if speed.compile else model) if stacked > 1 else speed.compiled(model)

    def step():
        with speed.autocast(device):
            loss = loss_of()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()

    return step


def evaluation_batch(spec: ClassificationTrainSpec, device, data: StepData = StepData(), stacked: int = 1):
    """One evaluation batch of a classification run as its training loop evaluates the test set
    after each epoch: `eval_batch_size` random uint8 images shaped as `data` through the model built
    as training builds it (uncompiled, as the loop evaluates), by evaluate/classification.py's
    `evaluate` (with `stacked` K, `evaluate_stacked` over K runs), which ends with a host read."""
    import torch

    from resrepro.evaluate.classification import eval_batch_size, evaluate, evaluate_stacked
    from resrepro.speed import speed_of

    torch.manual_seed(0)
    speed = speed_of(spec, device, image_model=True)
    if stacked > 1:
        speed = speed.stacked()
    nets = [classifier(spec, device, speed, data) for _ in range(stacked)]
    size = eval_batch_size(spec.batch_size)
    x = torch.randint(0, 256, (size, *data.image), dtype=torch.uint8, device=device)
    y = torch.randint(0, data.classes, (size,), device=device)
    mean, std = (0.5,) * data.image[0], (0.25,) * data.image[0]
    if stacked > 1:
        from resrepro.models.stacked import StackedRuns

        stack = StackedRuns(nets)
        return lambda: evaluate_stacked(stack, x, y, mean, std, size, speed)
    return lambda: evaluate(nets[0], x, y, mean, std, size, speed)


def dev_loss_pass(spec, device, data: StepData, pairs: int):
    """One dev loss of a translation run as its loop computes it at each checkpoint
    (train/translation.py's `dev_loss`): `pairs` random sentence pairs of `length` tokens a side,
    in batches of `max_tokens`, through the model built as training builds it."""
    import numpy as np
    import torch

    from resrepro import models
    from resrepro.speed import speed_of
    from resrepro.train.translation import TokenPairs, dev_loss

    torch.manual_seed(0)
    speed = speed_of(spec, device)
    model = models.build(models.model_spec(spec, vocab_size=data.vocab)).to(device)
    words = np.random.default_rng(0).integers(4, data.vocab, (pairs, 2, data.length))
    examples = TokenPairs([(src.tolist(), tgt.tolist()) for src, tgt in words], spec)
    return lambda: dev_loss(model, examples, spec, device, speed)


def measure_step(config: dict, run: experiments.Run, device_name: str, warmup: int, steps: int, key: str | None = None,
                 data_dir: Path | None = None) -> tuple[float, float]:
    """The median ms of the run's training step, of its self-critical update where `key` is the
    run's scst_key (benchmarks/scst_step_time.py's update), or of its evaluation batch where `key`
    is its eval_key; for a stacked key, of its K runs' step over K: one run's part of the GPU, what
    cost.run_gpu_hours (cost.eval_hours) reads. Then the seconds its model took to build and its
    warm-up took beyond as many steps at that time (warmup_excess_s): what cost.overhead_hours
    counts as a run's setup. On random data of the real datasets' shapes, or, with `data_dir`, of
    the prepared data's there."""
    warmup_times, times, setup_s = step_times(config, run, device_name, warmup, steps, key, data_dir=data_dir)
    return 1000 * statistics.median(times) / runs_sharing(key or "", "stacked"), setup_s + warmup_excess_s(warmup_times, times)


def measure_step_ms(config: dict, run: experiments.Run, device_name: str, warmup: int, steps: int, key: str | None = None,
                    data_dir: Path | None = None) -> float:
    """measure_step's median ms."""
    return measure_step(config, run, device_name, warmup, steps, key, data_dir)[0]


def warmup_excess_s(warmup_times: list[float], times: list[float]) -> float:
    """The seconds the warm-up steps took beyond as many steps at the timed steps' median: the
    first steps' compiling and first calls (none below 0, which is noise)."""
    return max(0.0, sum(warmup_times) - len(warmup_times) * statistics.median(times))


def step_times(config: dict, run: experiments.Run, device_name: str, warmup: int, steps: int, key: str | None = None,
               before_timing=lambda: None, data_dir: Path | None = None) -> tuple[list[float], list[float], float]:
    """The seconds of each of `warmup` untimed steps of `key` (see measure_step), then of each
    of `steps` timed ones (`before_timing` is called between them), then the seconds a training
    step's model took to build on the device with its optimizer (0 for the other keys: a
    self-critical stage, a dev loss and an evaluation use the model their run already built)."""
    import torch

    from resrepro.devices import pick_device, use_deterministic_algorithms

    # each key compiles afresh, as its run's own process does: dynamo recompiles one forward (a
    # model class's) at most 8 times and then runs it eagerly, which timed most of an H200
    # session's classification steps eagerly (docs/gpu-h200-2026-11-27-costs.md)
    torch._dynamo.reset()
    spec = experiments.train_spec(config, run)
    if key is not None and key.endswith(cost.NONDETERMINISTIC):
        use_fastest_algorithms()
        key = key.removesuffix(cost.NONDETERMINISTIC)
    elif spec.get("deterministic"):
        use_deterministic_algorithms()
    data = prepared_data(run, Path(data_dir)) if data_dir else real_data(run)
    device, setup_s = pick_device(device_name), 0.0
    if key is not None and key == cost.scst_key(run):
        from scst_step_time import self_critical_step

        step = self_critical_step(spec, device, spec.scst.batch_images, spec.scst.max_len, data.vocab, data.regions, data.feature_dim)
    elif key is not None and key == cost.dev_key(run):
        step = dev_loss_pass(spec, device, data, cost.dev_pairs(run))
        # a pass is dozens of batches, a second or more at paper size: a few passes time it, where
        # the paper's 24 dev keys at every step's count would take minutes of a GPU session
        warmup, steps = min(warmup, 1), min(steps, 2)
    elif key is not None and cost.is_eval_key(key):
        step = evaluation_batch(spec, device, data, stacked=runs_sharing(key, "stacked"))
    else:  # the run's own model, built as its training builds it: its setup
        started = time.perf_counter()
        step = training_step(spec, device, data, stacked=runs_sharing(key or "", "stacked"))
        setup_s = time.perf_counter() - started

    def timed() -> float:
        started = time.perf_counter()
        step()
        return time.perf_counter() - started

    warmup_times = [timed() for _ in range(warmup)]
    before_timing()
    return warmup_times, [timed() for _ in range(steps)], setup_s


def use_fastest_algorithms() -> None:
    """Undoes devices.use_deterministic_algorithms for the steps timed after it, back to torch's
    defaults, as a recipe without deterministic kernels trains; all but cuBLAS's workspace, which
    stays as cuBLAS started in this process (main times these keys last, so 32 MiB)."""
    import torch

    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.enable_cudnn_sdp(True)


def shared_step_ms(worker_times: list[list[float]]) -> float:
    """One run's part of the GPU when P runs step side by side: the median of the P processes'
    median step times (seconds), over P, in ms (a step of each of the P runs takes that long)."""
    return 1000 * statistics.median(statistics.median(times) for times in worker_times) / len(worker_times)


def measure_side_by_side(config_paths: list[str], keys: list[str], device_name: str, warmup: int, steps: int,
                         measured=lambda key, ms: None, data_dir: Path | None = None) -> dict[str, float]:
    """Keys `/processes{P}` (one P): P processes, as seeds_in_parallel starts them under their job's
    one GPU, each step every key's run alone (the key without its suffix), one key after another;
    for each key they time their steps together, after each has warmed up (and compiled), and one
    run's part of the GPU is shared_step_ms of their step times. The processes start once for all
    the keys (torch's import and CUDA's start-up are seconds each); `measured(key, ms)` is called
    as each key's times are in."""
    import tempfile

    from resrepro.devices import GPUS_HELD_BY_LAUNCH

    processes = {runs_sharing(key, "processes") for key in keys}
    if len(processes) != 1 or processes == {1}:
        raise ValueError(f"keys of one count of processes side by side, got {sorted(processes)}")
    processes = processes.pop()
    with tempfile.TemporaryDirectory(prefix="gpu-budget-") as work:
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", *(key.rsplit("/", 1)[0] for key in keys), "--work-dir", work,
                "--processes", str(processes), "--device", device_name, "--warmup", str(warmup), "--steps", str(steps),
                "--config", *(str(Path(path).resolve()) for path in config_paths),
                *(("--data-dir", str(Path(data_dir).resolve())) if data_dir else ())]
        env = {**os.environ, GPUS_HELD_BY_LAUNCH: "1"}  # the job's one GPU, not one each from the pool
        # in this folder, as the configs' relative paths (tables, the rehearsal's mirror) are
        workers = [subprocess.Popen([*argv, "--worker-index", str(i)], env=env) for i in range(processes)]
        return collect_side_by_side(workers, Path(work), keys, measured)


def collect_side_by_side(workers: list[subprocess.Popen], work: Path, keys: list[str], measured=lambda key, ms: None) -> dict[str, float]:
    """Each key's shared_step_ms once all `workers` have written its times to `work` (worker i's
    of key j to j-i.json), `measured(key, ms)` as each is in. A worker that fails ends it: the
    others, which would wait for it at the next key's barrier, are killed, and so is every worker
    left when it ends otherwise."""
    import json

    times_ms = {}
    try:
        while True:
            running = [worker.poll() is None for worker in workers]
            for j, key in enumerate(keys):
                results = [work / f"{j}-{i}.json" for i in range(len(workers))]
                if key not in times_ms and all(result.exists() for result in results):
                    times_ms[key] = shared_step_ms([json.loads(result.read_text()) for result in results])
                    measured(key, times_ms[key])
            if any(worker.returncode for worker in workers) or not any(running):
                break
            time.sleep(0.1)
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    failed = [worker.returncode for worker in workers if worker.returncode not in (0, -9)]
    if failed or len(times_ms) < len(keys):
        raise SystemExit(f"{len(times_ms)} of {len(keys)} keys side by side measured: a worker failed (exit codes {failed})")
    return times_ms


def wait_for_all(barrier: Path, processes: int, timeout_s: float = 1800.0) -> None:
    """Marks this process ready in `barrier` and waits until all `processes` are."""
    barrier.mkdir(exist_ok=True)
    (barrier / f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + timeout_s
    while len(list(barrier.glob("ready-*"))) < processes:
        if time.monotonic() > deadline:
            raise SystemExit(f"the other processes were not ready within {timeout_s:.0f} s")
        time.sleep(0.01)


def worker(opts: argparse.Namespace) -> None:
    """One of measure_side_by_side's processes: the steps of keys `opts.worker` of the configs, one
    after another, with one CPU thread as a job's process side by side has; each key's step times
    written to WORK/<key's index>-<worker's index>.json."""
    import json

    import torch

    torch.set_num_threads(1)
    steps = distinct_steps([cost.load_scale(path) for path in opts.config], evaluation=True)
    for j, key in enumerate(opts.worker):
        config, run = steps[key]
        _, times, _ = step_times(config, run, opts.device, opts.warmup, opts.steps, key,
                              before_timing=lambda: wait_for_all(Path(opts.work_dir, f"barrier-{j}"), opts.processes), data_dir=opts.data_dir)
        result = Path(opts.work_dir, f"{j}-{opts.worker_index}.json")
        Path(f"{result}.tmp").write_text(json.dumps(times))
        Path(f"{result}.tmp").replace(result)


def chosen_steps(steps: dict, patterns: list[str] | None) -> dict:
    """The steps whose key matches one of the shell-style `patterns` (all of them without any)."""
    if not patterns:
        return steps
    chosen = {key: step for key, step in steps.items() if any(fnmatch.fnmatchcase(key, p) for p in patterns)}
    if not chosen:
        raise SystemExit(f"--keys {' '.join(patterns)} matches none of the {len(steps)} step keys, e.g. {next(iter(steps))}")
    return chosen


def merge_measured(previous: dict, times: dict, patterns: list[str]) -> dict:
    """A step-times file whose steps matching `patterns` are `times`' new measurements and whose
    other steps stay as `previous` measured them. Only a measurement of the same session merges
    (device, commit and date): one file states one session's costs."""
    if previous["basis"] != "measured" or previous["device"] != times["device"]:
        raise SystemExit(f"--keys updates a file measured on this device ({times['device']}); "
                         f"the file holds {previous['basis']} times of {previous['device']}")
    if (str(previous.get("commit")), str(previous.get("date"))) != (times["commit"], times["date"]):
        raise SystemExit(f"--keys updates a file of this session (commit {times['commit']}, {times['date']}); the file holds "
                         f"times of commit {previous.get('commit')} on {previous.get('date')}: measure every step again, "
                         "without --keys")
    source = f"{previous['source'].rstrip()}; steps matching {' '.join(patterns)} re-{times['source']}"
    return {**previous, **times, "source": source, "step_ms": {**previous["step_ms"], **times["step_ms"]},
            **({"warmup_s": previous.get("warmup_s", {}) | times["warmup_s"]} if "warmup_s" in times else {})}


def measure_write_gb_s(directory: Path, megabytes: int = 512, rounds: int = 3) -> float:
    """GB/s of torch.save writing a checkpoint-sized state to `directory` and syncing it to disk
    (the median of `rounds`): the machine's figure for cost.overhead_hours's checkpoint writes."""
    import tempfile

    import torch

    state = {"weights": torch.zeros(megabytes * 2**20 // 4)}
    directory.mkdir(parents=True, exist_ok=True)
    times = []
    for _ in range(rounds):
        with tempfile.NamedTemporaryFile(dir=directory, suffix=".pt") as f:
            started = time.perf_counter()
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
            times.append(time.perf_counter() - started)
    return megabytes * 2**20 / 1e9 / statistics.median(times)


def largest_checkpoint_mb(configs_and_plans) -> int:
    """The MB of the scales' largest checkpoint file: a run's last.pt, its weights and optimizer
    state (disk.yaml's copies of its weights, the config's `gpu_costs.disk`). The write timed is
    that size, as the big Transformers' files are most of the bytes written, and a file of a few
    GB writes slower than one of a few hundred MB (0.62 against 0.80 GB/s on the development
    machine's disk, docs/performance.md)."""
    from resrepro.analysis.disk import copies_of, weight_bytes

    largest = 0.0
    for config, plan in configs_and_plans:
        copies = copies_of(config)
        cells = {dataclasses.replace(run, seed=0) for run in cost.tabled_runs(plan).values()}  # a cell's seeds weigh the same
        largest = max([largest, *(weight_bytes(run, config) * copies[f"{run.task}/last"] for run in cells)])
    return max(1, round(largest / 2**20))


def job_gpus(configs_and_plans) -> list[int]:
    """The numbers of GPUs the scales' costed runs' jobs hold (0: the CPU), each once."""
    return sorted({experiments.gpus_for(config, run) for config, plan in configs_and_plans for run in cost.tabled_runs(plan).values()})


def measure_job_start_s(device_name: str, gpus: list[int], repeats: int = 3) -> dict[int, float]:
    """Per number of GPUs a job holds (0: the CPU), the median seconds of `resrepro launch --gpus G
    -- devices`: a job starting as a training job does (the launcher; for several GPUs, torchrun
    and its ranks, each importing torch and resrepro, starting its device and making a first
    optimizer; their process group): what cost.run_hours counts once a job. On the CPU no GPU is
    visible and several "GPUs" are CPU ranks, as the CPU rehearsal runs its WMT jobs. A job on
    more GPUs than this machine has is not measured (cost.job_start_s takes the most measured)."""
    import torch

    from resrepro.devices import pooled_gpu
    from resrepro.preload import SOCKET_ENV

    if pooled_gpu() is not None:
        raise RuntimeError(f"a job's start is measured before this process takes a GPU (it holds cuda:{pooled_gpu()}): "
                           "the launcher would wait for that GPU")
    env = {key: value for key, value in os.environ.items() if key != SOCKET_ENV}  # a start of its own, not a preload server's fork
    if not device_name.startswith("cuda"):
        env["CUDA_VISIBLE_DEVICES"] = ""
    available = torch.cuda.device_count() if device_name.startswith("cuda") else None
    out = {}
    for count in gpus:
        if available is not None and count > available:
            print(f"a job's start on {count} GPUs: not measured, this machine has {available}", file=sys.stderr)
            continue
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "resrepro.cli", "launch", "--gpus", str(count), "--", "devices"],
                           check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times.append(time.perf_counter() - started)
        out[count] = round(statistics.median(times), 2)
    return out


def write_step_times(path: str | Path, times: dict) -> None:
    """The step-times file, replaced whole (written beside it, then renamed: a run stopped mid-write
    leaves the last complete file)."""
    tmp = Path(f"{path}.tmp")
    tmp.write_text(yaml.safe_dump(times, sort_keys=False, width=100))
    tmp.replace(path)


def device_label(device_name: str) -> str:
    import platform

    import torch

    if device_name.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def git_commit() -> str:
    """The commit the measured code is at: RESREPRO_COMMIT where set (a copy of the code without its
    .git, as on a lent GPU machine), else git's HEAD."""
    if commit := os.environ.get("RESREPRO_COMMIT"):
        return commit
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", nargs="+", default=["config/paper.yaml", "config/gpu-day.yaml"], help="the scales to cost")
    p.add_argument("--device", default="cuda")
    p.add_argument("--estimate", help="an anchors file: estimate every step from it instead of measuring")
    p.add_argument("--out", help="write the step-times file here (config/costs/*.yaml)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--keys", nargs="+", metavar="GLOB",
                   help="measure only the step keys matching these patterns and keep the other step times of --out's file")
    p.add_argument("--stacked", type=int, nargs="+", default=[], metavar="K",
                   help="also each classification step of K runs stacked as one program (keys .../stackedK)")
    p.add_argument("--write-dir", default=str(ROOT / "results"), help="where runs write their checkpoints: its write bandwidth is timed")
    p.add_argument("--write-mb", type=int, help="the size of the timed write (default: the scales' largest checkpoint file)")
    p.add_argument("--allreduce-gb-s", type=float, help="the NCCL all-reduce bus bandwidth of this machine's GPUs (nccl-tests' busbw), "
                   "for the multi-GPU runs' gradients; with --allreduce-source saying where it comes from")
    p.add_argument("--allreduce-source", default="")
    p.add_argument("--skip", nargs="+", metavar="GLOB", default=[], help="leave out the step keys matching these patterns")
    p.add_argument("--data-dir", help="time steps on data shaped as the prepared data here (a config's data_dir), not the real datasets")
    p.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)  # measure_side_by_side's processes: these keys' steps
    p.add_argument("--worker-index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--work-dir", help=argparse.SUPPRESS)
    p.add_argument("--processes", type=int, default=1, help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    if opts.worker:
        return worker(opts)
    if opts.allreduce_gb_s and not opts.allreduce_source:
        p.error("--allreduce-gb-s needs --allreduce-source: the report says where the bandwidth comes from")
    if opts.keys and (opts.estimate or not opts.out or not Path(opts.out).exists()):
        p.error("--keys updates an existing step-times file: name it with --out (and measure, without --estimate)")

    configs_and_plans = [cost.load_scale(path) for path in opts.config]
    steps = distinct_steps(configs_and_plans, tuple(opts.stacked), evaluation=not opts.estimate, switched=not opts.estimate)
    steps = {key: step for key, step in steps.items() if not any(fnmatch.fnmatchcase(key, glob) for glob in opts.skip)}
    today = datetime.date.today().isoformat()
    if opts.estimate:
        anchors = yaml.safe_load(Path(opts.estimate).read_text())
        step_ms = {key: round(cost.estimate_step_ms(run, anchors, key), 2) for key, (_, run) in steps.items()}
        times = {"device": anchors["device"], "basis": "estimate", "commit": anchors["commit"], "date": str(anchors["date"]),
                 "source": f"estimated {today} by benchmarks/gpu_budget.py from {opts.estimate}: {anchors['source'].strip()}", "step_ms": step_ms}
    else:
        import torch

        measured = chosen_steps(steps, opts.keys)
        session = {"device": device_label(opts.device), "commit": git_commit(), "date": today}
        previous = yaml.safe_load(Path(opts.out).read_text()) if opts.keys else None
        if previous:  # refuse another session's file before spending the GPU's time
            merge_measured(previous, {**session, "source": "", "step_ms": {}}, opts.keys)
        source = f"measured {today} by benchmarks/gpu_budget.py at commit {session['commit']}, torch {torch.__version__}"
        # the machine's own figures, once a session: a --keys run keeps those its file has
        write_gb_s = (previous or {}).get("checkpoint_write_gb_s") or round(
            measure_write_gb_s(Path(opts.write_dir), opts.write_mb or largest_checkpoint_mb(configs_and_plans)), 2)
        starts = dict((previous or {}).get("job_start_s", {}))
        starts |= measure_job_start_s(opts.device, [gpus for gpus in job_gpus(configs_and_plans) if gpus not in starts])
        times = {"device": session["device"], "basis": "measured", "commit": session["commit"], "date": today, "source": source,
                 "checkpoint_write_gb_s": write_gb_s, "job_start_s": starts, "warmup_s": {}, "step_ms": {}}
        if opts.allreduce_gb_s:
            times = {**times, "allreduce_bus_gb_s": opts.allreduce_gb_s, "allreduce_source": opts.allreduce_source}

        def record(key: str, ms: float, warmup_s: float | None = None) -> None:
            times["step_ms"][key] = round(ms, 2)
            if warmup_s is not None:
                times["warmup_s"][key] = round(warmup_s, 2)
            i = len(times["step_ms"])
            print(f"[{i}/{len(measured)}] {key}: {times['step_ms'][key]:.1f} ms", file=sys.stderr)
            if opts.out and i < len(measured):  # a run stopped at a time limit keeps what it measured, said partial
                partial = {**times, "source": f"{source} (partial: {i} of {len(measured)} keys measured)"}
                write_step_times(opts.out, merge_measured(previous, partial, opts.keys) if previous else partial)

        alone = [key for key in measured if runs_sharing(key, "processes") == 1]
        # the runs alone first: every scale's cost needs them; those with deterministic kernels off
        # last, so that cuBLAS starts with the deterministic keys' fixed workspace
        for key in sorted(alone, key=lambda key: key.endswith(cost.NONDETERMINISTIC)):
            config, run = measured[key]
            ms, warmup_s = measure_step(config, run, opts.device, opts.warmup, opts.steps, key, data_dir=opts.data_dir)
            record(key, ms, warmup_s if key in dict(cost.stages_of(run)) else None)  # the warm-ups cost.overhead_hours reads
        for processes in sorted({runs_sharing(key, "processes") for key in measured} - {1}):
            measure_side_by_side(opts.config, [key for key in measured if runs_sharing(key, "processes") == processes], opts.device, opts.warmup,
                                 opts.steps, measured=record, data_dir=opts.data_dir)
        if previous:
            times = merge_measured(previous, times, opts.keys)
    if opts.out:
        write_step_times(opts.out, times)
        print(f"wrote {opts.out} ({len(times['step_ms'])} step times)", file=sys.stderr)
    examples = None
    if opts.data_dir:  # the data timed on: its sizes too
        from resrepro.data.images import prepared_sizes

        examples = prepared_sizes(opts.data_dir)
    for config, plan in configs_and_plans:
        frame = cost.table_costs(plan, config, times, examples=examples)
        print(f"\n{config['scale']}: GPU-hours on {times['device']} ({times['basis']})")
        print(frame[["table", "runs", "seeds", "gpu_hours", "gpu_hours_per_seed"]].to_string(index=False, float_format="%.1f"))


if __name__ == "__main__":
    main()
