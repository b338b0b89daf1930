"""Checkpoints of a training run: the part both training loops share.

A loop keeps where it stands in one `LoopState`; a checkpoint holds it beside the model, the
optimizer and torch's random state, so a killed job resumes exactly where it stopped.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from .. import files
from ..models import load_checkpoint


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


def save(path: Path, model, optimizer, spec: dict, state: LoopState, model_spec: dict) -> None:
    """`model_spec` (models/registry.py) rebuilds the model from this file alone."""
    files.save_torch(path, {"model": model.state_dict(), "model_spec": model_spec, "optimizer": optimizer.state_dict(),
                            "torch_rng": torch.get_rng_state(), "spec": spec, **asdict(state)})


def resume(path: Path, spec: dict, model, optimizer) -> LoopState | None:
    """Restore model, optimizer and torch's random state from `path` when it was written for this
    very spec, and return the loop's state; None to start afresh."""
    for stale in path.parent.glob(".*.tmp"):  # a killed job's half-written files (files.atomic_write)
        stale.unlink(missing_ok=True)
    if not path.exists():
        return None
    ckpt = load_checkpoint(path)
    if ckpt["spec"] != spec:  # params changed: Snakemake reran the job, the old state is stale
        print(f"ignoring {path}: it was written for a different spec", file=sys.stderr)
        return None
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    torch.set_rng_state(ckpt["torch_rng"])
    print(f"resuming from {path} (step {ckpt['step']})", file=sys.stderr)
    return LoopState(**{f.name: ckpt[f.name] for f in fields(LoopState) if f.name in ckpt})
