"""Train one image-classification cell (any registered classification architecture) on a prepared
image dataset: the papers' CIFAR recipe.

SGD with momentum, a step learning rate (/10 at the milestone epochs, or the recipe's `lr_decay`), an optional warm-up at a
low rate for the first iterations (He et al. 2016b: 0.01 for 400 iterations, every CIFAR depth;
`warmup_min_depth` can restrict it to deep nets), random crop and flip. The dataset lives on the device as uint8 and is augmented there in batches (airbench-style),
so a CPU epoch on digits takes about a second and a GPU never waits on a loader.

Contracts (docs/design.md): a checkpoint after every epoch, written atomically, holding everything
needed to continue bit-identically (model, optimizer, both random states, the log so far);
a rerun resumes from it. A NaN/inf loss stops the run and records `diverged` with the step:
that is a result, not a crash. metrics.json carries the spec, the seed and provenance.
"""

from __future__ import annotations

import csv
import io
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.nn import functional as F
from tqdm import tqdm

from .. import files, models, provenance, residual
from ..data.images import epoch_batches, load_prepared, normalize, shifted
from ..devices import pick_device, use_deterministic_algorithms
from ..evaluate.classification import eval_batch_size, evaluate
from ..recipes import snapshot_epochs
from ..specs import ClassificationTrainSpec, ModelSpec
from ..speed import speed_of
from .checkpoint import LoopState, random_state, resume, save, save_snapshot
from .time_limit import TimeLimitReached, must_stop

LOG_FIELDS = ("epoch", "step", "lr", "train_loss", "train_error", "test_loss", "test_error", "seconds")


def lr_at(spec: ClassificationTrainSpec, epoch: int, step: int) -> float:
    """Step schedule: lr times `lr_decay` at each milestone epoch (0.1 unless the recipe says; a
    list gives each milestone its own factor, e.g. paper 003's 0.1 -> 0.01 -> 0.001 -> 0.00001);
    warm-up rate for the first iterations of models at least `warmup_min_depth` deep (He et al.
    2016b: 0.01 for 400 iterations, every depth; an architecture without a depth warms up whenever
    the recipe has warm-up iterations)."""
    if step < spec.warmup_iterations and spec.get("depth", spec.warmup_min_depth) >= spec.warmup_min_depth:
        return spec.warmup_lr
    decay = spec.get("lr_decay", 0.1)
    factors = decay if isinstance(decay, list) else [decay] * len(spec.lr_milestones)
    return spec.lr * math.prod(f for m, f in zip(spec.lr_milestones, factors) if epoch >= m)


def decay_targets(model: torch.nn.Module) -> dict:
    """{weight: centre} for the weights whose decay pulls towards a centre other than 0: paper 002's
    plain net trained equivalently to a residual one decays towards its ID entries (models/simple_net.py)."""
    return model.decay_targets() if hasattr(model, "decay_targets") else {}


def decay_groups(model: torch.nn.Module, centred: dict) -> list[dict]:
    """The optimizer's parameter groups: SGD's weight decay on every parameter but the centred
    ones, which the loop decays towards their centre itself."""
    ids = {id(weight) for weight in centred}
    groups = [{"params": [p for p in model.parameters() if id(p) not in ids]}]
    return groups + [{"params": list(centred), "weight_decay": 0.0}] if centred else groups


def epoch_row(state: LoopState, lr: float, loss_sum: float, wrong: int, seen: int, test_loss: float, test_error: float,
              seconds: float) -> dict:
    """The log's line for the epoch just finished: training loss and error over its batches (as
    trained, augmented), the test set's after it."""
    return {"epoch": state.epoch, "step": state.step, "lr": lr, "train_loss": loss_sum / seen, "train_error": 100.0 * wrong / seen,
            "test_loss": test_loss, "test_error": test_error, "seconds": seconds}


def log_csv(rows: list[dict], fields: tuple[str, ...] = LOG_FIELDS) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


@dataclass
class PreparedRun:
    """One run set up to train: built (or resumed from its checkpoint), its optimizer, its
    generator at the state to continue from, and the epochs whose weights it keeps."""

    model: torch.nn.Module
    model_spec: ModelSpec
    opt: torch.optim.Optimizer
    centred: dict
    state: LoopState
    gen: torch.Generator
    keep: list[int]


def prepare_run(spec: ClassificationTrainSpec, data: dict, out_dir: Path, device: torch.device, speed) -> PreparedRun:
    """A run's model (drawn from its seed), optimizer and loop state: resumed from out_dir's last
    checkpoint when it holds this spec, else fresh (its stale snapshots removed, Admin's profile
    taken); the snapshot of epoch 0 written when kept."""
    torch.manual_seed(spec.seed)
    gen = torch.Generator().manual_seed(spec.seed)  # shuffling and augmentation, CPU, saved in checkpoints
    model_spec = models.model_spec(spec, classes=len(data["classes"]), in_channels=data["train_x"].shape[1],
                                  image_size=data["train_x"].shape[-1])
    with speed.building():
        model = models.build(model_spec)
    model = speed.place(model, device)
    centred = decay_targets(model)
    opt = torch.optim.SGD(decay_groups(model, centred), lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay,
                          **speed.optimizer_options())

    state = resume(out_dir / "checkpoints" / "last.pt", spec.to_dict(), model, opt, device)
    if state is None:  # a fresh start: snapshots of an earlier spec's run are not this run's
        for _, stale in models.snapshots(out_dir):
            stale.unlink()
        models.first_step_path(out_dir).unlink(missing_ok=True)
        state = LoopState(generator=gen.get_state())
        first = data["train_x"][: spec.batch_size]
        # Admin's profile (a no-op for other variants): one batch through the fresh, uncompiled net (its
        # profiling branch would cost torch.compile a graph of its own)
        with speed.autocast(device):
            residual.initialize(model, lambda: model(speed.layout(normalize(first.to(device).float(), data["mean"], data["std"]))))
    gen.set_state(state.generator)
    keep = snapshot_epochs(spec.epochs, spec.get("snapshots", 0))
    if state.epoch == 0 and 0 in keep:
        save_snapshot(out_dir, 0, model, model_spec)
    return PreparedRun(model, model_spec, opt, centred, state, gen, keep)


def train(spec: ClassificationTrainSpec | Mapping, data_path: str | Path, out_dir: str | Path, device: str = "auto", progress: bool = True,
          stop_by: float | None = None) -> dict:
    """Run (or resume) one training run; writes out_dir/{train_log.csv, metrics.json, checkpoints/last.pt}
    and, where the recipe asks for `snapshots`, checkpoints/epoch<E>.pt (recipes.snapshot_epochs).
    With `stop_by` (time.time()), it stops after an epoch's checkpoint when the next epoch might not
    end before then (time_limit.TimeLimitReached)."""
    spec = ClassificationTrainSpec.of(spec)
    out_dir = Path(out_dir)
    ckpt_path = out_dir / "checkpoints" / "last.pt"
    if spec.get("deterministic"):
        use_deterministic_algorithms()
    device = pick_device(device)
    speed = speed_of(spec, device, image_model=True)
    data = load_prepared(data_path)

    run = prepare_run(spec, data, out_dir, device, speed)
    model, model_spec, opt, centred, state, gen, keep = run.model, run.model_spec, run.opt, run.centred, run.state, run.gen, run.keep
    forward = speed.compiled(model)

    def checkpoint():
        state.generator = gen.get_state()  # the live generator: the next epoch's shuffle and crops
        save(ckpt_path, model, opt, spec.to_dict(), state, model_spec, [random_state(device)])

    train_x, train_y = data["train_x"].to(device), data["train_y"].to(device)
    test_x, test_y = data["test_x"].to(device), data["test_y"].to(device)
    mean, std = data["mean"], data["std"]
    steps_per_epoch = math.ceil(len(train_y) / spec.batch_size)
    bar = tqdm(total=spec.epochs * steps_per_epoch, initial=state.step, desc=str(out_dir), disable=not progress, mininterval=2, file=sys.stderr)

    while state.epoch < spec.epochs and state.diverged is None:
        model.train()
        started, seen = time.perf_counter(), 0
        # summed on the device, read once an epoch: no host sync a step for the log (float64: the
        # sums the host's floats would give, bit for bit)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        wrong = torch.zeros((), dtype=torch.int64, device=device)
        pad, flip = spec.augment_pad, spec.augment_flip
        for idx, *draws in epoch_batches(len(train_y), spec.batch_size, pad, flip, gen, device):
            x = shifted(train_x[idx].float(), pad, *draws)
            x, y = speed.layout(normalize(x, mean, std)), train_y[idx]
            lr = lr_at(spec, state.epoch, state.step)
            for group in opt.param_groups:
                group["lr"] = lr
            with speed.autocast(device):
                # an epoch's last, shorter batch runs eagerly: a replayed CUDA graph holds one batch
                # size, and a compiled net would otherwise compile again for a dynamic one
                logits = (forward if len(y) == spec.batch_size else model)(x)
                loss = F.cross_entropy(logits.to(speed.dtype), y)
            state.step += 1
            bar.update(1)
            if not torch.isfinite(loss):
                state.diverged = {"epoch": state.epoch + 1, "step": state.step, "loss": str(loss.item())}
                break
            opt.zero_grad(set_to_none=True)
            loss.backward()
            for weight, centre in centred.items():  # the gradient of (lambda/2) ||w - centre||^2; SGD's own decay is off for these
                weight.grad.add_(weight.detach() - centre, alpha=spec.weight_decay)
            opt.step()
            if state.step == 1 and keep:  # the weights "after the first iteration" (paper 002, SM D.4.2)
                save_snapshot(out_dir, 1 / steps_per_epoch, model, model_spec, models.first_step_path(out_dir))
            loss_sum += loss.detach().double() * len(y)
            wrong += (logits.argmax(1) != y).sum()
            seen += len(y)
        if state.diverged is not None:
            break
        state.epoch += 1
        test_loss, test_error = evaluate(model, test_x, test_y, mean, std, eval_batch_size(spec.batch_size), speed)
        loss_sum, wrong = loss_sum.item(), int(wrong.item())
        state.log.append(epoch_row(state, lr, loss_sum, wrong, seen, test_loss, test_error, time.perf_counter() - started))
        bar.set_postfix(train_loss=f"{loss_sum / seen:.3f}", test_error=f"{test_error:.2f}")
        files.write_text(out_dir / "train_log.csv", log_csv(state.log))
        if state.epoch in keep:  # before last.pt: a job killed between the two redoes this epoch
            save_snapshot(out_dir, state.epoch, model, model_spec)
        checkpoint()
        if state.epoch < spec.epochs and must_stop(stop_by, time.perf_counter() - started):
            raise TimeLimitReached(f"{out_dir}: stopped after epoch {state.epoch} of {spec.epochs}, checkpointed, before the job's "
                                   "time limit; the next attempt continues from it")
    bar.close()
    if state.diverged is not None:  # remember it, so a rerun does not retrain a known divergence
        checkpoint()

    return write_results(spec, out_dir, state, model, speed, device)


def write_results(spec: ClassificationTrainSpec, out_dir: Path, state: LoopState, model, speed, device, **speed_extra) -> dict:
    """A run's train_log.csv and metrics.json (its spec, results, size, speed switches and provenance)."""
    metrics = summarize(spec, state.log, state.diverged)
    metrics["parameters"] = models.count_parameters(model)
    metrics["speed"] = asdict(speed) | speed_extra  # the switches as resolved on this device
    metrics["provenance"] = provenance.collect(device)
    files.write_text(out_dir / "train_log.csv", log_csv(state.log))
    files.write_json(out_dir / "metrics.json", metrics)
    return metrics


def summarize(spec: ClassificationTrainSpec, rows: list[dict], diverged: dict | None) -> dict:
    """Final-epoch numbers (the honest default) and best-epoch numbers (what some papers report)."""
    out = {"spec": spec.to_dict(), "seed": spec.seed, "diverged": diverged is not None, "diverged_at": diverged, "epochs_completed": len(rows)}
    out["wall_time_s"] = sum(r["seconds"] for r in rows)
    if diverged is not None or not rows:
        out["final"] = out["best"] = None
        return out
    last = rows[-1]
    best = min(rows, key=lambda r: r["test_error"])
    out["final"] = {k: last[k] for k in ("epoch", "train_loss", "train_error", "test_loss", "test_error")}
    out["final"]["test_accuracy"] = 100.0 - last["test_error"]
    out["best"] = {"epoch": best["epoch"], "test_error": best["test_error"], "test_accuracy": 100.0 - best["test_error"],
                   "train_loss": best["train_loss"]}
    return out
