"""One GPU per concurrent local job, checked without a GPU: the lock-file pool across processes."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from resrepro.devices import DevicePool, cuda_device_for_this_job

HOLDER = textwrap.dedent(
    """
    import sys, time
    from resrepro.devices import cuda_device_for_this_job
    print(cuda_device_for_this_job(int(sys.argv[1]), sys.argv[2]), flush=True)
    time.sleep(60)
    """
)


def start_holder(n, lock_dir):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
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
                              env={k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"})
    try:
        assert waiter.stdout.readline().strip() == "cuda:1"  # gpu0 is held here, gpu1 is free
    finally:
        waiter.kill()
        waiter.wait()
    holder.release()
    again = DevicePool(1, tmp_path)
    started = time.monotonic()
    assert again.acquire(timeout_s=1) == 0 and time.monotonic() - started < 1


def test_launcher_choice_and_single_gpu_need_no_pool(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert cuda_device_for_this_job(8, tmp_path) == "cuda"  # Slurm or torchrun already chose
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert cuda_device_for_this_job(1, tmp_path) == "cuda"
    assert not list(tmp_path.iterdir())
