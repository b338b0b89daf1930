"""Checkpoints of a training run: the part both training loops share.

A loop keeps where it stands in one `LoopState`; a checkpoint holds it beside the model, the
optimizer and torch's random state, so a killed job resumes exactly where it stopped. The random
state is each rank's own (under DDP they differ: every rank drops out on its own batches) and, on
a GPU, includes that GPU's generator, which dropout draws from there.
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from .. import files, recipes
from ..models import load_checkpoint, snapshot_path
from ..specs import ModelSpec


@dataclass
class LoopState:
    """Where a training loop stands: its counters, its log so far, a divergence (a result, kept so
    that a rerun does not retrain it), and the CPU generator state that orders its batches."""

    step: int = 0
    epoch: int = 0  # epochs finished
    position: int = 0  # translation: update groups done in the current epoch
    log: list[dict] = field(default_factory=list)
    diverged: dict | None = None
    generator: torch.Tensor | None = None  # classification: the live state; translation: at the epoch's start
    # Which training run wrote a checkpoint: a run that starts afresh in the same folder (its spec
    # changed, the folder name did not) gets a new id, and averaging refuses another run's steps.
    run_id: str | None = None


def resume_due(since_s: float, device=None, world: int = 1) -> bool:
    """Whether a checkpoint `since_s` seconds after the last resume point writes a new one (last.pt):
    after recipes.RESUME_EVERY_S on any rank, so every rank decides the same (a collective: every
    rank calls it at the same step)."""
    if world > 1:
        since = torch.tensor([since_s], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(since, op=torch.distributed.ReduceOp.MAX)
        since_s = since.item()
    return since_s >= recipes.RESUME_EVERY_S


def new_run_id() -> str:
    return uuid.uuid4().hex


def random_state(device: torch.device) -> dict:
    """torch's random state as this process draws from it: the CPU's and, on a GPU, that GPU's."""
    return {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def set_random_state(saved: dict, device: torch.device) -> None:
    torch.set_rng_state(saved["cpu"])
    if device.type == "cuda" and saved["cuda"] is not None:
        torch.cuda.set_rng_state(saved["cuda"], device)


def save(path: Path, model, optimizer, spec: dict, state: LoopState, model_spec: ModelSpec, random_states: list[dict]) -> None:
    """`spec`: the run's training spec as its JSON dict (Spec.to_dict: the file holds no class);
    `model_spec` (models/registry.py) rebuilds the model from this file alone; `random_states`
    holds every rank's random_state(), in rank order."""
    files.save_torch(path, {"model": model.state_dict(), "model_spec": model_spec.to_dict(), "optimizer": optimizer.state_dict(),
                            "random_states": random_states, "spec": spec, **asdict(state)})


def resume(path: Path, spec: dict, model, optimizer, device: torch.device = torch.device("cpu"), rank: int = 0) -> LoopState | None:
    """Restore model, optimizer and this rank's random state from `path` when it was written for
    this very spec (its JSON dict, as `save` wrote it), and return the loop's state; None to start afresh."""
    for stale in path.parent.glob(".*.tmp"):  # a killed job's half-written files (files.atomic_write)
        stale.unlink(missing_ok=True)
    if not path.exists():
        return None
    ckpt = load_checkpoint(path)
    if ckpt["spec"] != spec:  # params changed: Snakemake reran the job, the old state is stale
        print(f"ignoring {path}: it was written for a different spec", file=sys.stderr)
        return None
    if not same_shapes(ckpt["model"], model.state_dict()):  # the same spec, another model: a size preset changed in the code
        print(f"ignoring {path}: its weights do not fit this model (its size preset has changed since)", file=sys.stderr)
        return None
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    if "random_states" in ckpt:
        set_random_state(ckpt["random_states"][rank], device)
    else:  # written before per-rank states: one CPU state, which every rank took
        torch.set_rng_state(ckpt["torch_rng"])
    print(f"resuming from {path} (step {ckpt['step']})", file=sys.stderr)
    return LoopState(**{f.name: ckpt[f.name] for f in fields(LoopState) if f.name in ckpt})


def same_shapes(saved: dict, current: dict) -> bool:
    """Whether two state dicts hold the same entries with the same shapes."""
    return saved.keys() == current.keys() and all(saved[k].shape == current[k].shape for k in saved)


def save_snapshot(run_dir: Path, epoch: float, model, model_spec: ModelSpec, path: Path | None = None) -> None:
    """The model's weights after `epoch` epochs (at `path`, else the epoch's own snapshot path),
    rebuilt by models.from_checkpoint like last.pt."""
    files.save_torch(path or snapshot_path(run_dir, epoch), {"model": model.state_dict(), "model_spec": model_spec.to_dict(), "epoch": epoch})
