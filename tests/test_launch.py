"""Multi-GPU jobs without a GPU: `resrepro launch` picks its process (itself or torchrun ranks),
takes several GPUs from the local pool all at once, and runs a real 2-rank CPU (gloo) training."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from resrepro import launch
from resrepro.devices import DevicePool
from test_ddp import spec as ddp_spec
from test_devices import LAUNCHER_ENV

BIN = os.path.dirname(sys.executable)


def test_one_gpu_runs_the_command_itself_and_several_run_torchrun_ranks():
    assert launch.command(0, ["train", "--x"]) == [sys.executable, "-m", "resrepro.cli", "train", "--x"]
    assert launch.command(1, ["train"]) == [sys.executable, "-m", "resrepro.cli", "train"]
    cmd = launch.command(4, ["train", "translation", "--spec", "{}"])
    assert cmd[0].endswith("torchrun") and "--standalone" in cmd and "--nproc_per_node=4" in cmd
    assert cmd[-6:] == ["-m", "resrepro.cli", "train", "translation", "--spec", "{}"]


def test_a_multi_gpu_job_takes_its_gpus_together_or_waits(tmp_path, monkeypatch):
    for name in LAUNCHER_ENV:
        monkeypatch.delenv(name, raising=False)
    first, devices = launch.take_gpus(2, 4, tmp_path)
    assert devices == "0,1"
    second, devices = launch.take_gpus(2, 4, tmp_path)
    assert devices == "2,3"
    third = DevicePool(4, tmp_path)
    with pytest.raises(RuntimeError, match="fewer than 2 of 4 GPUs are free"):
        third.acquire_many(2, timeout_s=0)
    first.release()
    single = DevicePool(4, tmp_path)
    assert single.acquire(timeout_s=0) == 0  # the failed try held nothing back
    assert third.acquire_many(1, timeout_s=0) == [1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6,7")  # exported by hand: the pool picks among these
    fourth, devices = launch.take_gpus(2, 3, tmp_path / "other")
    assert devices == "4,6"


def test_a_launcher_needs_no_pool_and_too_few_gpus_is_an_error(monkeypatch, tmp_path):
    for name in LAUNCHER_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert launch.take_gpus(2, 2, tmp_path) == (None, None)  # Slurm gave this job its 2 GPUs
    shared, devices = launch.take_gpus(2, 8, tmp_path / "salloc")  # jobs sharing a larger allocation: the pool
    assert devices == "0,1"
    monkeypatch.delenv("SLURM_JOB_ID")
    monkeypatch.setenv("RESREPRO_GPUS_HELD_BY_LAUNCH", "1")
    assert launch.take_gpus(2, 2, tmp_path) == (None, None)  # an enclosing launch holds them
    monkeypatch.delenv("RESREPRO_GPUS_HELD_BY_LAUNCH")
    assert launch.take_gpus(2, 0, tmp_path) == (None, None)  # CPU ranks (gloo)
    with pytest.raises(RuntimeError, match="asks for 4 GPUs, this machine has 2"):
        launch.take_gpus(4, 2, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["salloc"]


# A launch whose command reports the GPUs it was given, then waits for the test to let it go.
# torch is patched to see two GPUs; `command` is patched so no torchrun starts.
LAUNCHER = textwrap.dedent(
    """
    import os, subprocess, sys, time, torch
    from resrepro import launch
    torch.cuda.device_count = lambda: 2
    go_on = sys.argv[2]
    child = "import os, sys, time; print(repr(os.environ.get('CUDA_VISIBLE_DEVICES')), os.environ.get('RESREPRO_GPUS_HELD_BY_LAUNCH'), flush=True)\\n"
    child += f"while not os.path.exists({go_on!r}): time.sleep(0.05)"
    launch.command = lambda gpus, argv: [sys.executable, "-c", child]
    launch.run_here = lambda env, argv, run_command: subprocess.run(launch.command(0, argv), env=env).returncode  # the CPU: in process
    sys.exit(launch.launch(int(sys.argv[1]), ["train"], None))
    """
)


@pytest.mark.parametrize("gpus, visible", [(0, "''"), (1, "'0'"), (2, "'0,1'")])
def test_launch_holds_its_gpus_until_the_command_ends(tmp_path, gpus, visible):
    """Seen from another process: while the command runs, its GPUs are locked (a multi-GPU job
    used to give them back before torchrun started); afterwards they are free. No GPU: nothing is
    visible to the command, so `gpus_per_job: 0` means the CPU on a GPU machine too."""
    from test_devices import locks_held

    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    go_on = tmp_path / "go_on"
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(gpus), str(go_on)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen, held_by_launch = proc.stdout.readline().split()
        assert seen == visible
        lock_dir = tmp_path / ".snakemake" / "gpu_locks"
        expected = [f"gpu{i}.lock" for i in range(gpus)]
        assert (locks_held(lock_dir) if lock_dir.exists() else []) == expected
        assert held_by_launch == ("1" if gpus else "None")
        go_on.touch()
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
        assert (locks_held(lock_dir) if lock_dir.exists() else []) == []
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    subprocess.run([f"{BIN}/resrepro", "prepare-translation", "synthetic", "--out-dir", str(out)], check=True, capture_output=True)
    return out


def run_launch(gpus: int, run_spec: dict, data, cell_dir) -> subprocess.CompletedProcess:
    """`resrepro launch` of `train translation` for the spec's seed, in <cell_dir>/seed<N>/."""
    env = {k: v for k, v in os.environ.items() if k not in launch.DDP_ENV}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [f"{BIN}/resrepro", "launch", "--gpus", str(gpus), "--", "train", "translation", "--spec", json.dumps(run_spec),
           "--seeds", str(run_spec["seed"]), "--cell-dir", str(cell_dir), "--done", str(cell_dir / "trained.json"),
           "--data", str(data), "--device", "cpu", "--threads", "1", "--no-progress"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.integration
def test_two_ranks_train_in_one_job_and_a_wrong_rank_count_fails_with_a_record(synthetic, tmp_path):
    run_spec = ddp_spec(size="mini_2block", max_tokens=400, max_updates=6, checkpoint_every=3, world_size=2)
    run = f"seed{run_spec['seed']}"
    done = run_launch(2, run_spec, synthetic, tmp_path / "two")
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((tmp_path / "two" / run / "metrics.json").read_text())
    assert metrics["updates"] == 6 and not (tmp_path / "two" / run / "failed.json").exists()
    assert json.loads((tmp_path / "two" / "trained.json").read_text())["seeds"] == [run_spec["seed"]]  # rank 0 wrote it

    wrong = run_launch(1, run_spec, synthetic, tmp_path / "one")
    assert wrong.returncode != 0
    failed = json.loads((tmp_path / "one" / run / "failed.json").read_text())
    assert "asks for 2 ranks" in failed["error"] and failed["command"] == "train translation"
    assert not (tmp_path / "one" / run / "metrics.json").exists() and not (tmp_path / "one" / "trained.json").exists()


IN_PROCESS = textwrap.dedent(
    """
    import os, sys
    os.environ["CUDA_VISIBLE_DEVICES"], os.environ["WORLD_SIZE"] = "0", "2"  # a GPU workstation, a stray DDP variable
    from resrepro import cli, launch

    def main(argv):
        print(os.getpid(), repr(os.environ.get("CUDA_VISIBLE_DEVICES")), os.environ.get("WORLD_SIZE"), *argv, flush=True)
        if argv == ["fail"]:
            raise SystemExit("evaluate: no checkpoint to read")

    print(os.getpid(), flush=True)
    sys.exit(launch.launch(0, sys.argv[1:], main))
    """
)


def test_a_cpu_job_runs_its_command_in_the_launching_process_with_no_gpu_visible():
    """gpus 0: no second interpreter (its start-up is paid by every short mini job), the command
    sees no GPU and no DDP variable, and its failure is the launch's, message included."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    ok = subprocess.run([sys.executable, "-c", IN_PROCESS, "measure", "--name", "x"], env=env, capture_output=True, text=True, timeout=60)
    launcher, command = ok.stdout.splitlines()
    assert ok.returncode == 0 and command == f"{launcher} '' None measure --name x"
    failed = subprocess.run([sys.executable, "-c", IN_PROCESS, "fail"], env=env, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1 and "evaluate: no checkpoint to read" in failed.stderr
