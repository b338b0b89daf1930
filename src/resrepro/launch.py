"""`resrepro launch --gpus N -- <command> ...`: run a resrepro command on N GPUs of one machine.

One GPU (or none): the command runs in this process's place. Several: torchrun starts N ranks of
it inside the same allocation (a Slurm job with --gpus=N, or a workstation), and DDP splits the
batches. On a workstation without a launcher's CUDA_VISIBLE_DEVICES, the N GPUs are taken from
the same lock pool single-GPU jobs use (devices.py) and held until the ranks end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .devices import DEFAULT_LOCK_DIR, DevicePool

DDP_ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def command(gpus: int, argv: list[str]) -> list[str]:
    """The process to start: `resrepro <argv>` itself, or torchrun with `gpus` ranks of it."""
    if gpus <= 1:
        return [sys.executable, "-m", "resrepro.cli", *argv]
    torchrun = Path(sys.executable).with_name("torchrun")
    return [str(torchrun), "--standalone", f"--nproc_per_node={gpus}", "-m", "resrepro.cli", *argv]


def visible_devices(gpus: int, device_count: int, pool: DevicePool | None = None) -> str | None:
    """CUDA_VISIBLE_DEVICES for a local multi-GPU job: `gpus` GPUs no other job holds (waiting for
    them), or None when a launcher already chose, the job needs one GPU, or there is no GPU."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None or gpus <= 1 or device_count == 0:
        return None  # a launcher chose, or a single device, or CPU ranks (gloo)
    if device_count < gpus:
        raise RuntimeError(f"the job asks for {gpus} GPUs, this machine has {device_count}")
    pool = pool or DevicePool(device_count, DEFAULT_LOCK_DIR)
    return ",".join(str(i) for i in pool.acquire_many(gpus, timeout_s=None))


def launch(gpus: int, argv: list[str]) -> int:
    if not argv:
        raise SystemExit("launch: give the resrepro command after --")
    env = {k: v for k, v in os.environ.items() if k not in DDP_ENV}
    if gpus > 1:
        import torch

        if (devices := visible_devices(gpus, torch.cuda.device_count())) is not None:
            env["CUDA_VISIBLE_DEVICES"] = devices
        print(f"launch: {gpus} ranks (CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', 'unset')})", file=sys.stderr)
    # The pool's locks stay held (this process keeps them open) until the ranks have ended.
    return subprocess.run(command(gpus, argv), env=env).returncode
