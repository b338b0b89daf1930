"""Resuming a run: the part of checkpoint handling both training loops share."""

from __future__ import annotations

import sys
from pathlib import Path

import torch


def load_checkpoint(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a truncated or foreign file: say which, not a deep torch traceback
        raise RuntimeError(f"checkpoint {path} is unreadable ({type(err).__name__}: {err}); delete it to start this run over") from None


def resume(path: Path, spec: dict, model, optimizer) -> dict | None:
    """Restore model, optimizer and torch's random state from `path` when it was written for this
    very spec, and return the checkpoint for the loop's own counters; None to start afresh."""
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
    return ckpt
