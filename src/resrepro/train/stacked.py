"""Train several seeds of one classification cell as one program: their models stacked
(models/stacked.py), one step for all of them.

Each run is the run `classification.train` trains alone: drawn from its own seed, its own
generator ordering and augmenting its batches, its own BN statistics, optimizer state, log,
snapshots and checkpoints in its own folder, in the same files. Only the float rounding of the
stacked kernels differs (tests/test_stacked_training.py: equal to 1e-9 in float64). A run that
diverges stops as it would alone (its checkpoint the weights before the step, `diverged` in its
metrics); the others go on. Runs resumed at different steps (a job trained one after another
before) train in groups, one group per step they stand at.

On a GPU a step of K ResNet-110 runs stacked costs what a few runs cost alone
(docs/gpu-h200-2026-11-27-stacked.md); on the CPU it costs more per run than training alone.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import torch
from torch.nn import functional as F
from tqdm import tqdm

from .. import files
from ..data.images import epoch_batches, load_prepared, normalize, shifted
from ..devices import pick_device, use_deterministic_algorithms
from ..evaluate.classification import eval_batch_size, evaluate_stacked
from ..models import first_step_path
from ..models.stacked import StackedRuns, optimizer_state, stack_optimizer_states
from ..specs import MISSING, ClassificationTrainSpec
from ..speed import speed_of
from .checkpoint import random_state, save, save_snapshot
from .classification import PreparedRun, epoch_row, log_csv, lr_at, prepare_run, write_results
from .time_limit import TimeLimitReached, must_stop


def train_stacked(specs: list[ClassificationTrainSpec | Mapping], data_path: str | Path, out_dirs: list, device: str = "auto", progress: bool = True,
                  stop_by: float | None = None) -> list[dict]:
    """Train (or resume) the runs `specs` (one cell's: the same spec but the seed) into `out_dirs`,
    stacked; returns each run's metrics, in order."""
    specs = [ClassificationTrainSpec.of(spec) for spec in specs]
    if any(spec.replace(seed=MISSING) != specs[0].replace(seed=MISSING) for spec in specs):
        raise ValueError("train_stacked: the runs differ in more than their seed; only one cell's seeds stack")
    spec0 = specs[0]
    if spec0.get("deterministic"):
        use_deterministic_algorithms()
    device = pick_device(device)
    speed = speed_of(spec0, device, image_model=True).stacked()
    data = load_prepared(data_path)
    out_dirs = [Path(d) for d in out_dirs]
    runs = [prepare_run(spec, data, out_dir, device, speed) for spec, out_dir in zip(specs, out_dirs)]
    unfinished = [k for k, run in enumerate(runs) if run.state.epoch < spec0.epochs and run.state.diverged is None]
    stacked_with = {}  # run -> how many runs it trained stacked with now (runs finished before: none)
    for _, group in itertools.groupby(sorted(unfinished, key=lambda k: runs[k].state.step), key=lambda k: runs[k].state.step):
        group = list(group)
        train_group([specs[k] for k in group], data, [out_dirs[k] for k in group], [runs[k] for k in group], device, speed, progress,
                    stop_by)
        stacked_with |= dict.fromkeys(group, len(group))
    return [write_results(spec, out_dir, run.state, run.model, speed, device,
                          **({"stacked_runs": stacked_with[k]} if k in stacked_with else {}))
            for k, (spec, out_dir, run) in enumerate(zip(specs, out_dirs, runs))]


def train_group(specs, data, out_dirs, runs: list[PreparedRun], device, speed, progress, stop_by) -> None:
    """Train runs that stand at the same step, stacked, to the end; each run's model in `runs`
    holds its trained weights after."""
    spec, count = specs[0], len(runs)
    stack = StackedRuns([run.model for run in runs])
    opt = stacked_optimizer(stack, runs[0], speed)
    opt.load_state_dict(stack_optimizer_states([run.opt.state_dict() for run in runs], optimized(opt)))
    centred = stacked_centres(stack, runs)
    forward = stack.compile(**speed.compile_options()) if speed.compile else stack
    states, live = [run.state for run in runs], [True] * count
    live_mask = torch.tensor(live, device=device)  # copied to the device when it changes, not every step
    epoch, step = states[0].epoch, states[0].step

    def checkpoint(k: int) -> None:
        """Run k's last.pt, as training alone writes it; its module takes the stack's weights."""
        runs[k].state.generator = runs[k].gen.get_state()
        runs[k].model.load_state_dict(stack.state_dict(k))
        runs[k].opt.load_state_dict(optimizer_state(opt.state_dict(), k, optimized(opt)))
        save(out_dirs[k] / "checkpoints" / "last.pt", runs[k].model, runs[k].opt, specs[k].to_dict(), runs[k].state, runs[k].model_spec,
             [random_state(device)])

    train_x, train_y = data["train_x"].to(device), data["train_y"].to(device)
    test_x, test_y = data["test_x"].to(device), data["test_y"].to(device)
    mean, std = data["mean"], data["std"]
    batch_size, steps_per_epoch = spec.batch_size, math.ceil(len(train_y) / spec.batch_size)
    bar = tqdm(total=spec.epochs * steps_per_epoch, initial=step, desc=f"{out_dirs[0].parent} ({count} stacked)",
               disable=not progress, mininterval=2, file=sys.stderr)
    while epoch < spec.epochs and any(live):
        stack.train()
        started = time.perf_counter()
        loss_sums = torch.zeros(count, dtype=torch.float64, device=device)  # on the device: no host sync a step
        wrong = torch.zeros(count, dtype=torch.int64, device=device)
        seen = 0
        pad, flip = spec.augment_pad, spec.augment_flip
        for batches in zip(*(epoch_batches(len(train_y), batch_size, pad, flip, run.gen, device) for run in runs)):
            xs = [shifted(train_x[idx].float(), pad, *draws) for idx, *draws in batches]
            x, y = normalize(torch.stack(xs), mean, std).to(speed.dtype), torch.stack([train_y[idx] for idx, *_ in batches])
            lr = lr_at(spec, epoch, step)
            for group in opt.param_groups:
                group["lr"] = lr
            with speed.autocast(device):
                # an epoch's last, shorter batch runs eagerly, as alone (a replayed graph holds one batch size)
                logits = (forward if y.shape[1] == batch_size else stack)(x)  # (runs, N, classes)
                losses = F.cross_entropy(logits.to(speed.dtype).flatten(0, 1), y.flatten(), reduction="none").view(count, -1).mean(1)
            step += 1
            bar.update(1)
            for k, finite in enumerate(torch.isfinite(losses).tolist()):  # the step's one host sync
                if live[k]:
                    states[k].step = step
                    if not finite:  # it stops as alone: its checkpoint holds the weights before this step
                        states[k].diverged = {"epoch": epoch + 1, "step": step, "loss": str(losses[k].item())}
                        live[k] = False
                        live_mask = torch.tensor(live, device=device)
                        checkpoint(k)
            if not any(live):
                break
            opt.zero_grad(set_to_none=True)
            # each run's loss, summed: run k's gradient is its own loss's; a diverged run's slot learns nothing
            torch.where(live_mask, losses, 0.0).sum().backward()
            for weight, centre in centred.items():  # as alone: decay towards the centre, SGD's own decay off
                weight.grad.add_(weight.detach() - centre, alpha=spec.weight_decay)
            opt.step()
            if step == 1 and runs[0].keep:  # the weights "after the first iteration" (paper 002, SM D.4.2)
                for k in range(count):
                    save_snapshot(out_dirs[k], 1 / steps_per_epoch, stack.module(k, like=runs[k].model), runs[k].model_spec,
                                  first_step_path(out_dirs[k]))
            loss_sums += losses.detach().double() * y.shape[1]
            wrong += (logits.argmax(-1) != y).sum(-1)
            seen += y.shape[1]
        if not any(live):
            break
        epoch += 1
        tested = evaluate_stacked(stack, test_x, test_y, mean, std, eval_batch_size(spec.batch_size), speed)
        for k, (loss_sum, errors, (test_loss, test_error)) in enumerate(zip(loss_sums.tolist(), wrong.tolist(), tested)):
            if live[k]:
                states[k].epoch = epoch
                states[k].log.append(epoch_row(states[k], lr, loss_sum, errors, seen, test_loss, test_error, time.perf_counter() - started))
                files.write_text(out_dirs[k] / "train_log.csv", log_csv(states[k].log))
                if epoch in runs[k].keep:  # before last.pt: a job killed between the two redoes this epoch
                    save_snapshot(out_dirs[k], epoch, stack.module(k, like=runs[k].model), runs[k].model_spec)
                checkpoint(k)
        bar.set_postfix(test_error=" ".join(f"{e:.2f}" for (_, e), on in zip(tested, live) if on))
        if epoch < spec.epochs and must_stop(stop_by, time.perf_counter() - started):
            raise TimeLimitReached(f"{out_dirs[0].parent}: {count} stacked runs stopped after epoch {epoch} of {spec.epochs}, "
                                   "checkpointed, before the job's time limit; the next attempt continues them")
    bar.close()


def optimized(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's parameters in the order its state_dict numbers them."""
    return [p for group in opt.param_groups for p in group["params"]]


def _names(model: torch.nn.Module) -> dict[int, str]:
    return {id(p): name for name, p in model.named_parameters()}


def stacked_optimizer(stack: StackedRuns, like: PreparedRun, speed) -> torch.optim.Optimizer:
    """SGD over the stacked parameters, grouped and set as a run's own optimizer (`like.opt`)."""
    names = _names(like.model)
    groups = [{**{key: value for key, value in group.items() if key != "params"}, "params": [stack.params[names[id(p)]] for p in group["params"]]}
              for group in like.opt.param_groups]
    return torch.optim.SGD(groups, **speed.optimizer_options())


def stacked_centres(stack: StackedRuns, runs: list[PreparedRun]) -> dict:
    """{stacked weight: the runs' centres, stacked} for the weights each run decays towards a centre."""
    by_name = [{_names(run.model)[id(w)]: centre for w, centre in run.centred.items()} for run in runs]
    return {stack.params[name]: torch.stack([centres[name] for centres in by_name]) for name in by_name[0]}
