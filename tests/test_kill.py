"""SIGKILL a real training process mid-run; the rerun resumes from the last complete checkpoint
and ends with exactly the numbers of an uninterrupted run (CPU, same seed)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from resrepro.data.digits import prepare_digits

pytestmark = pytest.mark.integration
CLI = Path(sys.executable).parent / "resrepro"
SPEC = {
    "task": "classification", "dataset": "digits", "arch": "preact_resnet14", "model": "preact_resnet", "depth": 14, "variant": "rskip_ln",
    "args": {"lam": 2}, "seed": 3, "epochs": 8, "batch_size": 64, "lr": 0.1, "momentum": 0.9, "weight_decay": 2e-4,
    "lr_milestones": [5], "warmup_lr": 0.01, "warmup_iterations": 0, "warmup_min_depth": 110, "augment_pad": 1,
    "augment_flip": False,
}


def train_cmd(data, out):
    """`resrepro train` of SPEC's one seed, whose run folder is `out` (<cell>/seed3)."""
    assert out.name == f"seed{SPEC['seed']}"
    return [str(CLI), "train", "classification", "--spec", json.dumps(SPEC), "--seeds", str(SPEC["seed"]), "--cell-dir", str(out.parent),
            "--done", str(out.parent / "trained.json"), "--data", str(data), "--threads", "1", "--device", "cpu", "--no-progress"]


def checkpoint_epoch(out) -> int:
    path = out / "checkpoints" / "last.pt"
    if not path.exists():
        return 0
    try:
        return torch.load(path, weights_only=True)["epoch"]
    except Exception:  # being replaced right now: atomic rename, so the next read works
        return 0


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The data and the final metrics of the run trained without interruption."""
    root = tmp_path_factory.mktemp("uninterrupted")
    data = root / "digits.pt"
    prepare_digits(data)
    subprocess.run(train_cmd(data, root / "whole" / "seed3"), check=True, capture_output=True)
    return data, json.loads((root / "whole" / "seed3" / "metrics.json").read_text())


def start_and_wait_for_checkpoint(data, out, epoch: int) -> subprocess.Popen:
    """A training process that has just written the checkpoint of `epoch`."""
    proc = subprocess.Popen(train_cmd(data, out), stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while checkpoint_epoch(out) < epoch and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be stopped; make it longer"
    return proc


@pytest.mark.parametrize("kill_after_epoch", [1, 4])
def test_sigkill_mid_epoch_then_rerun_matches_an_uninterrupted_run(tmp_path, uninterrupted, kill_after_epoch):
    data, whole = uninterrupted
    out = tmp_path / "killed" / "seed3"
    proc = start_and_wait_for_checkpoint(data, out, kill_after_epoch)
    time.sleep(0.1)  # into the next epoch
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "metrics.json").exists()
    killed_at = checkpoint_epoch(out)
    assert kill_after_epoch <= killed_at < SPEC["epochs"]
    rerun = subprocess.run(train_cmd(data, out), check=True, capture_output=True, text=True)
    assert "resuming from" in rerun.stderr
    resumed = json.loads((out / "metrics.json").read_text())
    assert resumed["final"] == whole["final"] and resumed["best"] == whole["best"]
    assert resumed["epochs_completed"] == SPEC["epochs"]


# Runs `resrepro train` with torch.save patched so that the Nth checkpoint write stops half-way
# (some bytes in the temp file) and says so: the test kills the process exactly there.
PAUSING_TRAIN = """
import os, sys, time
import torch
from resrepro import cli

real_save, saves = torch.save, [0]

def save(obj, f, *args, **kwargs):
    if isinstance(obj, dict) and "optimizer" in obj:
        saves[0] += 1
        if saves[0] == int(os.environ["PAUSE_AT_SAVE"]):
            with open(f, "wb") as half:
                half.write(b"PK\\x03\\x04 half a checkpoint")
            print("writing checkpoint", flush=True)
            time.sleep(600)
    return real_save(obj, f, *args, **kwargs)

torch.save = save
cli.main(sys.argv[1:])
"""


@pytest.mark.parametrize("pause_at_save", [1, 3])
def test_sigkill_during_the_checkpoint_write_keeps_the_last_complete_one(tmp_path, uninterrupted, pause_at_save):
    data, whole = uninterrupted
    out = tmp_path / "killed" / "seed3"
    env = {**os.environ, "PAUSE_AT_SAVE": str(pause_at_save)}
    proc = subprocess.Popen([sys.executable, "-c", PAUSING_TRAIN, *train_cmd(data, out)[1:]], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing checkpoint"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    ckpt_dir = out / "checkpoints"
    assert list(ckpt_dir.glob(".last.pt.*.tmp")), "the half-written temp file is left, as after a real kill"
    assert checkpoint_epoch(out) == pause_at_save - 1  # last.pt is the previous, complete checkpoint (or none)

    rerun = subprocess.run(train_cmd(data, out), check=True, capture_output=True, text=True)
    assert ("resuming from" in rerun.stderr) == (pause_at_save > 1)
    assert not list(ckpt_dir.glob("*.tmp")), "the rerun removes the dead job's temp files"
    resumed = json.loads((out / "metrics.json").read_text())
    assert resumed["final"] == whole["final"] and resumed["best"] == whole["best"]


def test_sigterm_as_at_a_time_limit_is_recorded_and_the_rerun_resumes(tmp_path, uninterrupted):
    """Slurm ends a job at its time limit with SIGTERM: the job leaves failed.json saying so and
    fails; the rerun resumes from the last checkpoint, finishes as an uninterrupted run, and
    removes failed.json."""
    data, whole = uninterrupted
    out = tmp_path / "run" / "seed3"
    proc = start_and_wait_for_checkpoint(data, out, 1)
    proc.terminate()
    assert proc.wait(timeout=60) != 0
    failed = json.loads((out / "failed.json").read_text())
    assert "terminated by SIGTERM" in failed["error"] and failed["command"] == "train classification"
    assert not (out / "metrics.json").exists()
    rerun = subprocess.run(train_cmd(data, out), check=True, capture_output=True, text=True)
    assert "resuming from" in rerun.stderr and not (out / "failed.json").exists()
    resumed = json.loads((out / "metrics.json").read_text())
    assert resumed["final"] == whole["final"] and resumed["best"] == whole["best"]


def test_a_run_longer_than_its_job_stops_at_a_checkpoint_and_the_next_job_continues_it(tmp_path, uninterrupted):
    """A job of --minutes too short for the run (here 0.6 s) stops after an epoch's checkpoint, before
    its limit, fails (so Snakemake's retry starts the next job) and says why; the next job
    continues the run to exactly the numbers of an uninterrupted run."""
    data, whole = uninterrupted
    out = tmp_path / "limited" / "seed3"
    first = subprocess.run([*train_cmd(data, out), "--minutes", "0.01"], capture_output=True, text=True)
    assert first.returncode != 0
    stopped_at = checkpoint_epoch(out)
    assert 1 <= stopped_at < SPEC["epochs"]
    failed = json.loads((out / "failed.json").read_text())
    assert f"stopped after epoch {stopped_at} of {SPEC['epochs']}, checkpointed, before the job's time limit" in failed["error"]
    assert not (out / "metrics.json").exists() and not (out.parent / "trained.json").exists()
    rerun = subprocess.run([*train_cmd(data, out), "--minutes", "60"], check=True, capture_output=True, text=True)
    assert f"resuming from {out / 'checkpoints' / 'last.pt'} (step" in rerun.stderr
    resumed = json.loads((out / "metrics.json").read_text())
    assert resumed["final"] == whole["final"] and resumed["best"] == whole["best"]
    assert not (out / "failed.json").exists()
