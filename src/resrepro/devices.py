"""Which device a job runs on, and one GPU per local job: a pool of lock files.

With `--resources gpu=N` Snakemake starts at most N GPU jobs at once but does not say which GPU
each should use. Each job therefore takes the first free `gpu<id>.lock` in a shared folder with an
exclusive, non-blocking flock and keeps the file open for its lifetime; the kernel releases the
lock when the process ends, even on SIGKILL, so a crashed job never leaks its GPU. Locks are named
by the physical GPU (an entry of CUDA_VISIBLE_DEVICES when a workstation exports one), so jobs
that see the GPUs in different orders still exclude each other.

A launcher that already gave the process its GPUs is trusted instead: a Slurm allocation,
torchrun (each rank takes cuda:LOCAL_RANK) and `resrepro launch`, which holds the locks of the
GPUs it hands its command (launch.py).
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

DEFAULT_LOCK_DIR = Path(".snakemake") / "gpu_locks"
GPUS_HELD_BY_LAUNCH = "RESREPRO_GPUS_HELD_BY_LAUNCH"  # set by `resrepro launch` for the command it runs


def launcher_chose_gpus() -> bool:
    """Whether this process's GPUs were chosen for it: a Slurm job, a torchrun rank, or a command
    that `resrepro launch` started with GPUs whose locks it holds."""
    return any(os.environ.get(name) for name in ("SLURM_JOB_ID", "LOCAL_RANK", GPUS_HELD_BY_LAUNCH))


def visible_gpus(device_count: int) -> list[str]:
    """The physical names of the GPUs torch numbers 0..device_count-1: CUDA_VISIBLE_DEVICES's
    entries (indices or UUIDs) when set, else the indices themselves."""
    listed = [name.strip() for name in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if name.strip()]
    return listed[:device_count] if listed else [str(i) for i in range(device_count)]


class DevicePool:
    """`devices`: the GPUs' physical names (visible_gpus), or a count for 0..n-1. acquire() returns
    positions in that list, which are torch's device indices."""

    def __init__(self, devices: int | list[str], lock_dir: str | Path = DEFAULT_LOCK_DIR):
        self.names = [str(i) for i in range(devices)] if isinstance(devices, int) else list(devices)
        if not self.names:
            raise ValueError("a device pool needs at least one device")
        self.n_devices, self.lock_dir = len(self.names), Path(lock_dir)
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
                handle = open(self.lock_dir / f"gpu{self.names[index]}.lock", "a")
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
    """"cuda:<i>": the launcher's choice (cuda:LOCAL_RANK, else cuda:0), or a visible GPU that no
    other local job holds, taken from the pool (the same one on every call)."""
    global _POOL, _INDEX
    if launcher_chose_gpus():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    if _INDEX is None:
        _POOL = DevicePool(visible_gpus(device_count), lock_dir)
        _INDEX = _POOL.acquire(timeout_s=None)  # a queue: more jobs than GPUs wait their turn
    return f"cuda:{_INDEX}"


def pooled_gpu() -> int | None:
    """The GPU this process took from the pool (`cuda_device_for_this_job`) and holds till it ends;
    None when it took none. A `resrepro launch` it starts waits for that GPU."""
    return _INDEX


def pick_device(name: str = "auto"):
    """The torch device a job runs on, always with an index, and made CUDA's current device (NCCL,
    CUDA's random generator and new tensors all follow it). auto: a GPU when one is visible (the
    launcher's or one of its own from the pool), else the CPU; "cuda": the same, but a GPU is
    required; "cpu", "cuda:1", ...: as given. The one place that chooses; training, evaluation and
    measurements call it."""
    import torch  # here, not at the top: the workflow imports this package while parsing

    if name in ("auto", "cuda"):
        if torch.cuda.is_available():
            name = cuda_device_for_this_job(torch.cuda.device_count())
        elif name == "cuda":
            raise RuntimeError("--device cuda: no GPU is visible to this process (CUDA_VISIBLE_DEVICES="
                               f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')!r}); use --device cpu or auto")
        else:
            name = "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def use_deterministic_algorithms() -> None:
    """The same seed gives the same numbers on the same GPU and software (the recipe's
    `deterministic: true`): torch's deterministic mode (an operation without a deterministic kernel
    raises instead of silently differing), cuDNN's deterministic convolutions without autotuning,
    cuBLAS with a fixed workspace (read when cuBLAS starts: call this before the first matrix
    product), and no cuDNN attention, whose backward is not deterministic. The CPU is deterministic
    without it. Process-wide: a job runs one training."""
    import torch

    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.enable_cudnn_sdp(False)


def join_process_group(device) -> None:
    """This rank joins its job's process group, once: NCCL between GPUs, gloo between CPU ranks."""
    import torch

    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")


def check_devices(name: str = "auto") -> str:
    """This rank's device checked as a training job starts on it, and the line saying so: the device
    `pick_device` gives, one SGD step of a tiny model there (a torch build without kernels for the
    GPU, or a broken driver, fails here, not after the data has loaded), and, under torchrun, the
    ranks' process group with one all-reduce of their ranks (NCCL on GPUs, gloo on CPU ranks), as
    DDP starts it. `resrepro launch --gpus N -- devices`: a job's GPUs checked before it trains, and
    the time a job takes to start (benchmarks/gpu_budget.py)."""
    import torch

    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    device = pick_device(name)
    weight = torch.nn.Parameter(torch.ones(4, 4, device=device))
    optimizer = torch.optim.SGD([weight], lr=0.1)  # as a training job's first optimizer, it imports torch._dynamo
    (weight @ weight).sum().backward()  # each entry's gradient is 2 x 4 = 8
    optimizer.step()
    if not torch.allclose(weight.detach().cpu(), torch.full((4, 4), 0.2)):
        raise RuntimeError(f"{device}: one SGD step gave {weight.detach().cpu()[0].tolist()}, not 0.2 everywhere: "
                           "this device computes wrongly")
    line = f"rank {rank} of {world}: {device}"
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        line += f" ({torch.cuda.get_device_name(device)}, {free / 2**30:.1f} of {total / 2**30:.1f} GiB free)"
    if world > 1:
        join_process_group(device)
        ranks = torch.tensor([float(rank)], device=device)
        torch.distributed.all_reduce(ranks)
        torch.distributed.destroy_process_group()
        if ranks.item() != world * (world - 1) / 2:
            raise RuntimeError(f"{device}: the all-reduce of the ranks 0..{world - 1} gave {ranks.item():g}, "
                               f"not {world * (world - 1) // 2}")
        line += f"; all-reduce over {world} ranks: ok"
    return line
