"""Device choice and one GPU per concurrent local job, checked without a GPU: CUDA patched, and
the lock-file pool across processes."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from resrepro.devices import DevicePool, cuda_device_for_this_job

LAUNCHER_ENV = ("SLURM_JOB_ID", "LOCAL_RANK", "RESREPRO_GPUS_HELD_BY_LAUNCH", "CUDA_VISIBLE_DEVICES")
HOLDER = textwrap.dedent(
    """
    import sys, time
    from resrepro.devices import cuda_device_for_this_job
    print(cuda_device_for_this_job(int(sys.argv[1]), sys.argv[2]), flush=True)
    time.sleep(60)
    """
)


def start_holder(n, lock_dir):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(n), str(lock_dir)], stdout=subprocess.PIPE, text=True, env=env)
    return proc, proc.stdout.readline().strip()


def test_concurrent_jobs_get_distinct_gpus_and_a_killed_job_frees_its_own(tmp_path):
    first, dev_a = start_holder(2, tmp_path)
    second, dev_b = start_holder(2, tmp_path)
    try:
        assert {dev_a, dev_b} == {"cuda:0", "cuda:1"}
        with pytest.raises(RuntimeError, match="all 2 GPUs are taken"):
            DevicePool(2, tmp_path).acquire(timeout_s=0)
        first.kill()  # SIGKILL: the kernel drops its lock
        first.wait()
        pool = DevicePool(2, tmp_path)
        assert f"cuda:{pool.acquire(timeout_s=5)}" == dev_a
        pool.release()
    finally:
        for proc in (first, second):
            proc.kill()
            proc.wait()


def test_a_waiting_job_gets_the_gpu_when_it_is_released(tmp_path):
    holder = DevicePool(1, tmp_path)
    assert holder.acquire() == 0
    waiter = subprocess.Popen([sys.executable, "-c", HOLDER, "2", str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env={k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV})
    try:
        assert waiter.stdout.readline().strip() == "cuda:1"  # gpu0 is held here, gpu1 is free
    finally:
        waiter.kill()
        waiter.wait()
    holder.release()
    again = DevicePool(1, tmp_path)
    started = time.monotonic()
    assert again.acquire(timeout_s=1) == 0 and time.monotonic() - started < 1


@pytest.fixture
def fake_cuda(monkeypatch, tmp_path):
    """torch sees `count` GPUs (set it); torch.cuda.set_device records its index; the pool's
    default lock folder lies in tmp_path; no launcher variables; this process holds no GPU yet."""
    import torch

    from resrepro import devices

    state = {"count": 1, "current": []}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: state["count"] > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: state["count"])
    monkeypatch.setattr(torch._C, "_cuda_setDevice", state["current"].append, raising=False)
    monkeypatch.setattr(devices, "_POOL", None)
    monkeypatch.setattr(devices, "_INDEX", None)
    monkeypatch.chdir(tmp_path)
    for name in LAUNCHER_ENV:
        monkeypatch.delenv(name, raising=False)
    return state


def locks_held(lock_dir) -> list[str]:
    """The lock files in `lock_dir` that some process holds (tried here without blocking)."""
    import fcntl

    held = []
    for path in sorted(lock_dir.glob("gpu*.lock")):
        with open(path, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(path.name)
    return held


def test_auto_on_one_gpu_gives_an_indexed_device_set_current_and_locked(fake_cuda, tmp_path):
    """`torch.cuda.set_device("cuda")` raises (no index): every CUDA device picked has an index,
    and it is made the current device (NCCL and CUDA's random generator follow it)."""
    from resrepro.devices import pick_device

    device = pick_device("auto")
    assert str(device) == "cuda:0" and fake_cuda["current"] == [0]
    assert locks_held(tmp_path / ".snakemake" / "gpu_locks") == ["gpu0.lock"]  # held by this process
    assert str(pick_device("cuda")) == "cuda:0"  # the same GPU again, not a second one


def test_explicit_devices_are_honoured_even_when_a_gpu_is_there(fake_cuda, monkeypatch):
    from resrepro.devices import pick_device

    fake_cuda["count"] = 2
    assert str(pick_device("cpu")) == "cpu" and fake_cuda["current"] == []
    assert str(pick_device("cuda:1")) == "cuda:1" and fake_cuda["current"] == [1]
    monkeypatch.setenv("LOCAL_RANK", "1")  # a torchrun rank: auto and cuda mean its own GPU
    assert str(pick_device("auto")) == str(pick_device("cuda")) == "cuda:1"
    assert str(pick_device("cpu")) == "cpu"  # CPU ranks stay CPU ranks
    fake_cuda["count"] = 0
    assert str(pick_device("auto")) == "cpu"
    with pytest.raises(RuntimeError, match="--device cuda: no GPU is visible"):
        pick_device("cuda")


def test_a_launcher_choice_needs_no_pool(fake_cuda, tmp_path, monkeypatch):
    fake_cuda["count"] = 8
    for launcher, value in [("SLURM_JOB_ID", "42"), ("RESREPRO_GPUS_HELD_BY_LAUNCH", "1")]:
        monkeypatch.setenv(launcher, value)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
        assert cuda_device_for_this_job(1, tmp_path) == "cuda:0"  # the one GPU it was given
        monkeypatch.delenv(launcher)
    assert not list(tmp_path.glob("gpu*.lock"))


def test_an_exported_cuda_visible_devices_still_goes_through_the_pool(tmp_path):
    """A workstation that exports CUDA_VISIBLE_DEVICES=2,3 is not a launcher: two jobs get the two
    GPUs, locked by their physical names, not both the first one."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    holders = [subprocess.Popen([sys.executable, "-c", HOLDER, "2", str(tmp_path)], stdout=subprocess.PIPE, text=True,
                                env={**env, "CUDA_VISIBLE_DEVICES": "2,3"}) for _ in range(2)]
    try:
        assert sorted(h.stdout.readline().strip() for h in holders) == ["cuda:0", "cuda:1"]
        assert locks_held(tmp_path) == ["gpu2.lock", "gpu3.lock"]
    finally:
        for proc in holders:
            proc.kill()
            proc.wait()


def test_a_jobs_device_check_takes_one_training_step_and_refuses_a_wrong_one(monkeypatch):
    """One SGD step of a 4x4 model of ones on sum(W @ W): every gradient is 8, every weight 0.2
    after it at lr 0.1; a device whose step gives anything else is refused."""
    import torch

    from resrepro.devices import check_devices

    for name in ("WORLD_SIZE", "RANK"):
        monkeypatch.delenv(name, raising=False)
    assert check_devices("cpu") == "rank 0 of 1: cpu"
    monkeypatch.setattr(torch.optim.SGD, "step", lambda self, closure=None: None)
    with pytest.raises(RuntimeError, match=r"cpu: one SGD step gave \[1.0, 1.0, 1.0, 1.0\], not 0.2 everywhere"):
        check_devices("cpu")


def test_a_ranks_device_check_all_reduces_the_ranks(monkeypatch):
    """Rank 0 of 2 (gloo on the CPU): the all-reduce of the ranks 0 and 1 gives 1; one that gives
    rank 0's own 0 (the other rank never joined) is refused."""
    import torch

    from resrepro.devices import check_devices

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    backends = []
    monkeypatch.setattr(torch.distributed, "init_process_group", backends.append)
    monkeypatch.setattr(torch.distributed, "destroy_process_group", lambda: None)
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda tensor: tensor.add_(1.0))  # rank 1's part
    assert check_devices("cpu") == "rank 0 of 2: cpu; all-reduce over 2 ranks: ok" and backends == ["gloo"]
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda tensor: None)
    with pytest.raises(RuntimeError, match="the all-reduce of the ranks 0..1 gave 0, not 1"):
        check_devices("cpu")


@pytest.mark.integration
def test_launch_checks_a_two_rank_jobs_devices():
    """`resrepro launch --gpus 2 -- devices` with no GPU visible: torchrun's 2 CPU ranks each take
    their step and all-reduce together."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    for name in LAUNCHER_ENV[:3]:
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-m", "resrepro.cli", "launch", "--gpus", "2", "--", "devices"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(done.stdout.split("\n"))[-2:] == [f"rank {r} of 2: cpu; all-reduce over 2 ranks: ok" for r in (0, 1)]
