"""A job's time limit as the training loops see it: a run stops at a checkpoint when the next
stretch of training might not end before the limit, and the job's next attempt resumes it.

Slurm kills a job at its --time (SIGTERM, then SIGKILL); a run that needs longer than one job may
ask for (config max_job_minutes) would lose everything since its last checkpoint, at every limit.
Stopping just after a checkpoint loses nothing.
"""

from __future__ import annotations

import time

import torch


class TimeLimitReached(SystemExit):
    """A run stopped, checkpointed, before its job's time limit: the job fails (so Snakemake runs
    it again, as a retry) and the next attempt continues from the checkpoint."""


def deadline(minutes: float | None, started: float) -> float | None:
    """When a job of `minutes` started at `started` (time.time()) should have stopped training:
    a margin before the limit for start-up, the last write and Slurm's grace, at most 5 minutes."""
    if not minutes:
        return None
    return started + minutes * 60 - min(300.0, 0.1 * minutes * 60)


def must_stop(stop_by: float | None, stretch_s: float, device=None, world: int = 1) -> bool:
    """Whether twice the last stretch between checkpoints (`stretch_s`) would run past `stop_by`.
    With several ranks, all stop if any would (a collective: every rank calls it at the same step)."""
    stop = stop_by is not None and time.time() + 2 * stretch_s > stop_by
    if world > 1:
        flag = torch.tensor([float(stop)], device=device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        stop = bool(flag.item())
    return stop
