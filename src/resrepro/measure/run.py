"""Run one registered measurement on one trained run: its checkpoint in, a tidy CSV out."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .. import files
from . import get


def load_data(task: str, data_path: str | Path) -> dict:
    if task != "classification":
        raise NotImplementedError(f"measurements of {task} runs: no measurement reads them yet")
    from ..data.images import load_prepared

    return load_prepared(data_path)


def in_its_dtype(model) -> None:
    """A model trained in float64 (paper 002's equivalent training) is measured in float64: the
    float32 images the measurements feed it are cast on the way in."""
    import torch  # here: the log-reading measurements never import it

    dtype = next(model.parameters()).dtype
    if dtype != torch.float32:
        model.register_forward_pre_hook(lambda module, args: tuple(a.to(dtype) if torch.is_floating_point(a) else a for a in args))


# A snapshot taken before its net finished an epoch (initialisation, or after the first step) is
# measured with the measured batch's BatchNorm statistics; every later one with its running
# statistics, as the trained net is evaluated. Before any step a BatchNorm layer's running statistics
# are their initial mean 0 and variance 1 (one step in, 90% still are), so in eval mode it would not
# normalise at all: a net nobody runs. Paper 003 reads its sharing nets "during the forward
# propagation at initialization" (Sec. 4.5), which is training's, normalised by the batch;
# paper 002 reads its gradient flow "after the first iteration" of training (SM D.4.2).
BATCH_STATISTICS_BEFORE_EPOCH = 1


def use_batch_statistics(model) -> int:
    """Make every BatchNorm layer of `model` normalise by the statistics of the batch it is fed,
    in eval mode too, without updating any running statistics; how many layers it changed."""
    from torch import nn

    layers = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for layer in layers:  # with no running statistics, F.batch_norm uses the batch's
        layer.running_mean = None
        layer.running_var = None
    return len(layers)


def statistics_for(epoch: float) -> str:
    """Which BatchNorm statistics a snapshot of this epoch is measured with: "batch" or "running"."""
    return "batch" if epoch < BATCH_STATISTICS_BEFORE_EPOCH else "running"


def run_measurement(name: str, run_dir: str | Path, data_path: str | Path, settings: dict, out: str | Path, device: str = "auto",
                    threads: int = 0) -> None:
    """Rebuild the run's final model from checkpoints/last.pt (its model_spec) and measure it, on
    `threads` CPU threads (0: torch's default); a measurement that reads the training log gets the
    run's folder instead, one that reads snapshots measures each in turn (an `epoch` column says which),
    those of its first epoch with the batch's BatchNorm statistics (statistics_for)."""
    measurement = get(name)
    run_dir = Path(run_dir)
    if measurement.recipe_keys:  # e.g. the weight decay whose term weight_stats reports
        recipe = json.loads((run_dir / "metrics.json").read_text())["spec"]
        settings = {**settings, **{key: recipe[key] for key in measurement.recipe_keys}}
    if measurement.reads == "log":
        files.write_text(out, measurement.measure(run_dir, settings).to_csv(index=False))
        return
    import torch

    from .. import models  # torch: only for the measurements that read a model
    from ..devices import pick_device

    if threads:
        torch.set_num_threads(threads)
    by_epoch = measurement.reads in ("snapshots", "first_step_and_end")  # rows tagged with each file's own epoch
    if by_epoch:
        kept = [path for _, path in models.snapshots(run_dir)]
        if not kept:
            raise ValueError(f"{name}: {run_dir} kept no snapshots; its recipe needs `snapshots: N` (a refinement of the "
                             "scale's classification recipe), and the run trains again to keep them")
        if measurement.reads == "first_step_and_end":
            first = models.first_step_path(run_dir)
            if not first.exists():
                raise ValueError(f"{name}: {run_dir} has no weights after its first step ({first.name}), which runs that keep "
                                 "snapshots save from this version on: train the run again (snakemake --forcerun train_classifier)")
            kept = [first, kept[-1]]
    else:
        kept = [run_dir / "checkpoints" / "last.pt"]
    dev = pick_device(device)
    data = load_data(measurement.task, data_path)
    frames = []
    for path in kept:
        checkpoint = models.load_checkpoint(path)
        model = models.from_checkpoint(checkpoint).to(dev).eval()
        if by_epoch and statistics_for(checkpoint["epoch"]) == "batch":
            use_batch_statistics(model)
        in_its_dtype(model)
        frame = measurement.measure(model, data, settings, dev)
        frames.append(frame.assign(epoch=checkpoint["epoch"]) if by_epoch else frame)
    files.write_text(out, pd.concat(frames, ignore_index=True).to_csv(index=False))
