"""One GPU per local job: a pool of lock files, because Snakemake assigns no GPU ids to local jobs.

With `--resources gpu=N` Snakemake starts at most N GPU jobs at once but does not say which GPU
each should use. Each job therefore takes the first free `gpu<i>.lock` in a shared folder with an
exclusive, non-blocking flock and keeps the file open for its lifetime; the kernel releases the
lock when the process ends, even on SIGKILL, so a crashed job never leaks its GPU. Under Slurm
(or any launcher that sets CUDA_VISIBLE_DEVICES) the launcher's choice is used instead.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

DEFAULT_LOCK_DIR = Path(".snakemake") / "gpu_locks"


class DevicePool:
    def __init__(self, n_devices: int, lock_dir: str | Path = DEFAULT_LOCK_DIR):
        if n_devices < 1:
            raise ValueError("a device pool needs at least one device")
        self.n_devices, self.lock_dir = n_devices, Path(lock_dir)
        self._held = []  # the open lock files of the devices this process holds

    def acquire(self, timeout_s: float | None = 0.0, poll_s: float = 0.5) -> int:
        """Index of a free device, held until release() or the end of the process; waits up to
        `timeout_s` seconds for one (None: as long as it takes)."""
        return self.acquire_many(1, timeout_s, poll_s)[0]

    def acquire_many(self, n: int, timeout_s: float | None = 0.0, poll_s: float = 0.5) -> list[int]:
        """Indices of `n` free devices, taken together (all or none, so two multi-GPU jobs cannot each
        hold half and wait for each other forever)."""
        if n > self.n_devices:
            raise RuntimeError(f"{n} GPUs asked for, the pool has {self.n_devices}")
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        waiting = False
        while True:
            taken = []
            for index in range(self.n_devices):
                handle = open(self.lock_dir / f"gpu{index}.lock", "a")
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    handle.close()
                    continue
                taken.append((index, handle))
                if len(taken) == n:
                    self._held += [h for _, h in taken]
                    return [i for i, _ in taken]
            for _, handle in taken:
                handle.close()  # not enough free: give back the partial set before waiting
            if deadline is not None and time.monotonic() >= deadline:
                taken_text = f"all {self.n_devices} GPUs are taken" if n == 1 else f"fewer than {n} of {self.n_devices} GPUs are free"
                raise RuntimeError(f"{taken_text} (locks in {self.lock_dir}); "
                                   "run with --resources gpu=<number of GPUs> so Snakemake starts no more jobs than GPUs")
            if not waiting:
                print(f"waiting for {n} free GPUs of {self.n_devices} (locks in {self.lock_dir})", file=sys.stderr)
                waiting = True
            time.sleep(poll_s)

    def release(self) -> None:
        for handle in self._held:
            handle.close()  # closing the file drops the flock
        self._held = []


_POOL: DevicePool | None = None  # this process's pool; it holds one device for the process's life
_INDEX: int | None = None


def cuda_device_for_this_job(device_count: int, lock_dir: str | Path = DEFAULT_LOCK_DIR) -> str:
    """"cuda" when a launcher already chose (CUDA_VISIBLE_DEVICES) or there is one GPU; otherwise
    "cuda:<i>" for a GPU that no other local job holds (the same one on every call)."""
    global _POOL, _INDEX
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None or device_count <= 1:
        return "cuda"
    if _INDEX is None:
        _POOL = DevicePool(device_count, lock_dir)
        _INDEX = _POOL.acquire(timeout_s=None)  # a queue: more jobs than GPUs wait their turn
    return f"cuda:{_INDEX}"


def pick_device(name: str = "auto"):
    """The torch device a job runs on. auto: a GPU of its own when there are several (the pool
    above), the GPU, or the CPU. The one place that chooses; training and evaluation call it."""
    import torch  # here, not at the top: the workflow imports this package while parsing

    if name == "auto":
        name = cuda_device_for_this_job(torch.cuda.device_count()) if torch.cuda.is_available() else "cpu"
    return torch.device(name)
