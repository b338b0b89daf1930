"""`resrepro launch --gpus N -- <command> ...`: run a resrepro command on the N GPUs its job holds.

None: the command runs on the CPU with no GPU visible (a job that holds no GPU must not use one):
in a child of the local run's warm server (preload.py) when there is one, else in this process.
One: the command runs on its GPU. Several: torchrun starts N ranks of it inside the same
allocation (a Slurm job with --gpus=N, or a workstation), and DDP splits the batches. Unless
Slurm gave the job exactly its GPUs, they are taken from the lock pool (devices.py) and held here
until the command ends; the command sees only them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from . import preload
from .devices import DEFAULT_LOCK_DIR, GPUS_HELD_BY_LAUNCH, DevicePool, visible_gpus

DDP_ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def command(gpus: int, argv: list[str]) -> list[str]:
    """The process to start: `resrepro <argv>` itself, or torchrun with `gpus` ranks of it."""
    if gpus <= 1:
        return [sys.executable, "-m", "resrepro.cli", *argv]
    torchrun = Path(sys.executable).with_name("torchrun")
    return [str(torchrun), "--standalone", f"--nproc_per_node={gpus}", "-m", "resrepro.cli", *argv]


def run_here(env: dict[str, str], argv: list[str], run_command) -> int:
    """A CPU command runs in this process with `run_command` (cli.main), under `env`: no second
    interpreter to start and no second set of imports (a quarter of a second for each of the mini
    scale's many short jobs). Nothing here has initialised CUDA, so the emptied CUDA_VISIBLE_DEVICES
    still hides every GPU."""
    os.environ.clear()
    os.environ.update(env)
    run_command(argv)  # a failure exits as the command would have: its SystemExit or exception propagates
    return 0


def take_gpus(gpus: int, device_count: int, lock_dir: str | Path = DEFAULT_LOCK_DIR) -> tuple[DevicePool | None, str | None]:
    """(the pool holding them, their CUDA_VISIBLE_DEVICES) for a local job's `gpus` GPUs, ones no
    other job holds (waiting for them); (None, None) when a launcher already chose them, or there
    is no GPU (CPU ranks, gloo). The GPUs stay taken while the returned pool lives.

    A Slurm job that sees exactly its `gpus` GPUs was given them by Slurm; one that sees more
    (local Snakemake jobs sharing a larger interactive allocation) shares them through the pool."""
    if gpus < 1 or device_count == 0 or os.environ.get(GPUS_HELD_BY_LAUNCH) or os.environ.get("LOCAL_RANK"):
        return None, None
    if os.environ.get("SLURM_JOB_ID") and device_count == gpus:
        return None, None
    if device_count < gpus:
        raise RuntimeError(f"the job asks for {gpus} GPUs, this machine has {device_count}")
    names = visible_gpus(device_count)
    pool = DevicePool(names, lock_dir)
    return pool, ",".join(names[i] for i in pool.acquire_many(gpus, timeout_s=None))


def launch(gpus: int, argv: list[str], run_command) -> int:
    """Run the resrepro command line `argv` on the job's `gpus`: in this process with `run_command`
    (cli.main, passed in: this module imports nothing of the command line's) when it holds none."""
    if not argv:
        raise SystemExit("launch: give the resrepro command after --")
    env = {k: v for k, v in os.environ.items() if k not in DDP_ENV}
    pool = None
    if gpus == 0:
        env["CUDA_VISIBLE_DEVICES"] = ""  # gpus_per_job: 0 means the CPU, even on a GPU machine
        print("launch: the CPU only (CUDA_VISIBLE_DEVICES='')", file=sys.stderr)
        if (server := preload.usable()) is not None:
            code = preload.run_remote(server, argv, env)
            if code is not None:
                return code
            print(f"launch: no preload server answers at {server}: starting here", file=sys.stderr)
        return run_here(env, argv, run_command)
    import torch

    pool, devices = take_gpus(gpus, torch.cuda.device_count())
    if devices is not None:
        env["CUDA_VISIBLE_DEVICES"], env[GPUS_HELD_BY_LAUNCH] = devices, "1"
    what = "1 GPU" if gpus == 1 else f"{gpus} GPUs, {gpus} ranks"
    print(f"launch: {what} (CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', 'unset')!r})", file=sys.stderr)
    try:
        return subprocess.run(command(gpus, argv), env=env).returncode
    finally:
        if pool is not None:
            pool.release()  # only now: the command and all its ranks have ended
