"""Training contracts: determinism, resume after a kill, divergence as a result, provenance."""

import json
from importlib import metadata
from pathlib import Path

import pytest
import torch

from resrepro import models
from resrepro.data.digits import prepare_digits
from resrepro.train import classification
from resrepro.specs import MISSING, ClassificationTrainSpec
from resrepro.train.classification import lr_at, train


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "digits.pt"
    prepare_digits(path)
    return path


def spec(**over):
    base = {
        "task": "classification", "dataset": "digits", "arch": "preact_resnet8", "model": "preact_resnet", "depth": 8, "variant": "rskip_ln",
        "args": {"lam": 2}, "seed": 0, "epochs": 3, "batch_size": 128, "lr": 0.1, "momentum": 0.9,
        "weight_decay": 2e-4, "lr_milestones": [2], "warmup_lr": 0.01, "warmup_iterations": 0,
        "warmup_min_depth": 110, "augment_pad": 1, "augment_flip": False,
    }
    return {**base, **over}


def typed(**over) -> ClassificationTrainSpec:
    """spec(**over) as the job parses its --spec."""
    return ClassificationTrainSpec.from_dict(spec(**over))


def test_lr_schedule_matches_the_papers_recipe():
    s = typed(depth=110, lr_milestones=[81, 122], warmup_iterations=400)
    assert lr_at(s, 0, 0) == 0.01 and lr_at(s, 0, 399) == 0.01  # He et al. 2016b warm-up at depth 110
    assert lr_at(s, 1, 400) == 0.1
    assert lr_at(s, 81, 10**5) == pytest.approx(0.01) and lr_at(s, 122, 10**6) == pytest.approx(0.001)
    assert lr_at(typed(depth=56, warmup_iterations=400), 0, 0) == 0.1  # no warm-up below 110


def test_lr_decay_gives_each_milestone_its_factor():
    """Paper 003: 0.1 until 40, 0.02 until 60, 0.004 until 80, 0.0008 after (factor 0.2); its
    ResNet-110: 0.1, 0.01, 0.001, 0.00001, 0.000011 (one factor per milestone)."""
    s = typed(lr_milestones=[40, 60, 80], lr_decay=0.2)
    assert [lr_at(s, e, 0) for e in (39, 40, 59, 60, 80, 199)] == pytest.approx([0.1, 0.02, 0.02, 0.004, 0.0008, 0.0008])
    s = typed(lr_milestones=[80, 120, 200, 240], lr_decay=[0.1, 0.1, 0.01, 1.1])
    assert [lr_at(s, e, 0) for e in (0, 80, 120, 200, 240)] == pytest.approx([0.1, 0.01, 0.001, 0.00001, 0.000011])
    no_depth = typed(warmup_iterations=400, warmup_min_depth=0).replace(depth=MISSING)
    assert lr_at(no_depth, 0, 0) == 0.01 and lr_at(no_depth, 1, 400) == 0.1  # a net sized by name warms up as the recipe says


def test_same_seed_same_numbers_and_files(digits, tmp_path):
    a = train(spec(), digits, tmp_path / "a", device="cpu", progress=False)
    b = train(spec(), digits, tmp_path / "b", device="cpu", progress=False)
    assert a["final"] == b["final"]
    assert (tmp_path / "a" / "train_log.csv").read_text().split("\n")[1].split(",")[:7] == (tmp_path / "b" / "train_log.csv").read_text().split("\n")[1].split(",")[:7]
    c = train(spec(seed=1), digits, tmp_path / "c", device="cpu", progress=False)
    assert c["final"] != a["final"]
    m = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert m["spec"] == spec() and m["seed"] == 0 and m["diverged"] is False and m["epochs_completed"] == 3
    assert {"versions", "device", "git_commit", "host"} <= set(m["provenance"])
    assert m["provenance"]["versions"]["torch"] == metadata.version("torch")  # the installed torch, whatever the pin
    assert m["best"]["test_error"] <= m["final"]["test_error"]
    assert m["final"]["test_accuracy"] == pytest.approx(100 - m["final"]["test_error"])
    ckpt = torch.load(tmp_path / "a" / "checkpoints" / "last.pt", weights_only=True)  # rebuilds its model alone
    assert ckpt["model_spec"] == {"arch": "preact_resnet", "depth": 8, "variant": "rskip_ln", "args": {"lam": 2}, "classes": 10, "in_channels": 1,
                                  "image_size": 8}
    assert models.count_parameters(models.from_checkpoint(ckpt)) == m["parameters"]


def test_resume_after_a_kill_gives_the_uninterrupted_result(digits, tmp_path, monkeypatch):
    whole = train(spec(), digits, tmp_path / "whole", device="cpu", progress=False)
    saved = classification.save
    calls = {"n": 0}

    def killed_after_first_epoch(*args, **kwargs):
        saved(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt  # stands for SIGKILL right after the epoch-1 checkpoint

    monkeypatch.setattr(classification, "save", killed_after_first_epoch)
    with pytest.raises(KeyboardInterrupt):
        train(spec(), digits, tmp_path / "resumed", device="cpu", progress=False)
    assert not (tmp_path / "resumed" / "metrics.json").exists()  # nothing looks finished
    ckpt = torch.load(tmp_path / "resumed" / "checkpoints" / "last.pt", weights_only=True)
    assert ckpt["epoch"] == 1
    resumed = train(spec(), digits, tmp_path / "resumed", device="cpu", progress=False)
    assert resumed["final"] == whole["final"] and resumed["best"] == whole["best"]
    a = torch.load(tmp_path / "whole" / "checkpoints" / "last.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "resumed" / "checkpoints" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoint_for_another_spec_is_not_resumed(digits, tmp_path):
    train(spec(epochs=1), digits, tmp_path, device="cpu", progress=False)
    m = train(spec(epochs=2), digits, tmp_path, device="cpu", progress=False)
    assert m["epochs_completed"] == 2 and m["final"]["epoch"] == 2


def test_corrupt_checkpoint_is_named(digits, tmp_path):
    ckpt = tmp_path / "checkpoints" / "last.pt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"not a checkpoint")
    with pytest.raises(RuntimeError, match=str(ckpt)):
        train(spec(), digits, tmp_path, device="cpu", progress=False)


def test_divergence_is_recorded_not_raised(digits, tmp_path):
    m = train(spec(variant="xskip", args={"lam": 3}, lr=1e12, epochs=2), digits, tmp_path, device="cpu", progress=False)
    assert m["diverged"] is True and m["final"] is None
    assert m["diverged_at"]["step"] >= 1
    assert json.loads((tmp_path / "metrics.json").read_text())["diverged"] is True
    again = train(spec(variant="xskip", args={"lam": 3}, lr=1e12, epochs=2), digits, tmp_path, device="cpu", progress=False)
    assert again["diverged_at"] == m["diverged_at"]  # a rerun does not retrain a known divergence


def test_atomic_write_leaves_old_file_on_failure_and_readable_files(tmp_path):
    from resrepro import files

    target = tmp_path / "metrics.json"
    files.write_json(target, {"a": 1})
    assert target.stat().st_mode & 0o044  # group/other can read, as with a plain open()

    def crash(tmp):
        tmp.write_text('{"half": ')
        raise KeyboardInterrupt  # killed during the write

    with pytest.raises(KeyboardInterrupt):
        files.atomic_write(target, crash)
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]  # no temp file left behind


@pytest.fixture
def deterministic_mode_restored(monkeypatch):
    """use_deterministic_algorithms() is process-wide: put torch's switches back afterwards."""
    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
             torch.backends.cuda.cudnn_sdp_enabled())
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    yield
    torch.use_deterministic_algorithms(saved[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[1], saved[2]
    torch.backends.cuda.enable_cudnn_sdp(saved[3])


def test_deterministic_recipe_turns_on_every_switch_and_keeps_the_cpu_numbers(digits, tmp_path, deterministic_mode_restored):
    """`deterministic: true` sets torch's deterministic mode, deterministic cuDNN without
    autotuning, the cuBLAS workspace and no cuDNN attention before training; on the CPU, already
    deterministic, the numbers are those of the same seed without it."""
    import os

    plain = train(spec(), digits, tmp_path / "plain", device="cpu", progress=False)
    assert not torch.are_deterministic_algorithms_enabled()
    strict = train(spec(deterministic=True), digits, tmp_path / "strict", device="cpu", progress=False)
    assert torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic
    assert not torch.backends.cudnn.benchmark and not torch.backends.cuda.cudnn_sdp_enabled()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert strict["final"] == plain["final"] and strict["spec"]["deterministic"] is True


def train_job(digits, cell, seeds, *options, **over):
    """`resrepro train` of a job of several seeds, in this process (as the rule runs it)."""
    from resrepro import cli

    job = {k: v for k, v in spec(epochs=1, lr_milestones=[], **over).items() if k != "seed"}
    cli.main(["train", "classification", "--spec", json.dumps(job), "--seeds", *map(str, seeds), "--data", str(digits), "--cell-dir", str(cell),
              "--done", str(cell / "seeds.json"), "--device", "cpu", "--no-progress", *options])


def test_a_job_trains_each_seed_into_its_folder_as_a_run_of_its_own(digits, tmp_path):
    train_job(digits, tmp_path / "cell", [0, 2])
    done = json.loads((tmp_path / "cell" / "seeds.json").read_text())
    assert done["seeds"] == [0, 2] and sorted(done["runs"]) == ["seed0", "seed2"]
    for seed in (0, 2):  # each seed: exactly the run one train() call gives
        alone = train(spec(epochs=1, lr_milestones=[], seed=seed), digits, tmp_path / f"alone{seed}", device="cpu", progress=False)
        metrics = json.loads((tmp_path / "cell" / f"seed{seed}" / "metrics.json").read_text())
        assert metrics["seed"] == seed and metrics["final"] == alone["final"] == done["runs"][f"seed{seed}"]["final"]
    assert not (tmp_path / "cell" / "seed1").exists()


def test_a_failing_seed_is_recorded_the_next_still_trains_and_the_job_fails(digits, tmp_path):
    cell = tmp_path / "cell"
    (cell / "seed0" / "checkpoints").mkdir(parents=True)
    (cell / "seed0" / "checkpoints" / "last.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit, match=r"seed\(s\) 0 of .* failed"):
        train_job(digits, cell, [0, 1])
    failed = json.loads((cell / "seed0" / "failed.json").read_text())
    assert "is unreadable" in failed["error"] and failed["command"] == "train classification"
    assert (cell / "seed1" / "metrics.json").exists() and not (cell / "seed0" / "metrics.json").exists()
    assert not (cell / "seeds.json").exists()  # the job's output: only when every seed succeeded

    (cell / "seed0" / "checkpoints" / "last.pt").unlink()
    train_job(digits, cell, [0, 1])
    assert not (cell / "seed0" / "failed.json").exists() and (cell / "seeds.json").exists()


def test_seeds_side_by_side_give_the_runs_one_after_another_give(digits, tmp_path):
    """--parallel 2: each seed its own process on the job's device (small runs sharing a GPU); the
    runs and the job's record are those of the sequential job."""
    train_job(digits, tmp_path / "sequential", [0, 1])
    train_job(digits, tmp_path / "parallel", [0, 1], "--parallel", "2")
    one_by_one = json.loads((tmp_path / "sequential" / "seeds.json").read_text())
    side_by_side = json.loads((tmp_path / "parallel" / "seeds.json").read_text())
    assert side_by_side == one_by_one and sorted(side_by_side["runs"]) == ["seed0", "seed1"]
    for seed in (0, 1):
        metrics = [json.loads((tmp_path / job / f"seed{seed}" / "metrics.json").read_text()) for job in ("sequential", "parallel")]
        assert metrics[0]["final"] == metrics[1]["final"] and not (tmp_path / "parallel" / f"seed{seed}" / "done.json").exists()


def test_seeds_side_by_side_share_out_the_jobs_threads(tmp_path, monkeypatch):
    """A job of K processes holds K cores (the rule's threads): each process takes its share of
    them, not all of them (K processes of K threads each would oversubscribe the job's cores)."""
    import subprocess

    from resrepro import cli

    started = []

    def start(argv, **_):
        started.append(argv)
        done = Path(argv[argv.index("--done", argv.index("--parallel")) + 1])  # the per-seed --done, after the job's
        done.parent.mkdir(parents=True, exist_ok=True)
        done.write_text(json.dumps({"runs": {done.parent.name: {}}}))
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(subprocess, "run", start)
    cli.main(["train", "classification", "--spec", "{}", "--seeds", "0", "1", "2", "3", "--data", str(tmp_path), "--cell-dir",
              str(tmp_path / "cell"), "--done", str(tmp_path / "cell" / "seeds.json"), "--threads", "4", "--parallel", "2"])
    threads = [int(argv[len(argv) - 1 - argv[::-1].index("--threads") + 1]) for argv in started]  # argparse: the last one counts
    assert threads == [2, 2, 2, 2] and json.loads((tmp_path / "cell" / "seeds.json").read_text())["seeds"] == [0, 1, 2, 3]


def test_a_stacked_job_writes_the_runs_and_record_of_the_sequential_job(digits, tmp_path):
    """--stack 1: the job's seeds as one program (train/stacked.py); its record and each run's
    result are the sequential job's (in float64: the same test errors, losses to float rounding)."""
    train_job(digits, tmp_path / "sequential", [0, 1], dtype="float64")
    train_job(digits, tmp_path / "stacked", [0, 1], "--stack", "1", dtype="float64")
    one_by_one = json.loads((tmp_path / "sequential" / "seeds.json").read_text())
    stacked = json.loads((tmp_path / "stacked" / "seeds.json").read_text())
    assert stacked["seeds"] == [0, 1] and sorted(stacked["runs"]) == ["seed0", "seed1"]
    for seed in ("seed0", "seed1"):
        mine, theirs = stacked["runs"][seed]["final"], one_by_one["runs"][seed]["final"]
        assert mine["test_error"] == theirs["test_error"] and mine["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-9)
        assert json.loads((tmp_path / "stacked" / seed / "metrics.json").read_text())["speed"]["stacked_runs"] == 2


def test_a_failing_stacked_job_records_each_seeds_failure(digits, tmp_path):
    cell = tmp_path / "cell"
    (cell / "seed1" / "checkpoints").mkdir(parents=True)
    (cell / "seed1" / "checkpoints" / "last.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit, match=r"the stacked seeds 0, 1 of .* failed"):
        train_job(digits, cell, [0, 1], "--stack", "1")
    for seed in (0, 1):
        assert "is unreadable" in json.loads((cell / f"seed{seed}" / "failed.json").read_text())["error"]
    with pytest.raises(SystemExit, match="cannot combine with --parallel 2"):
        train_job(digits, cell, [0, 1], "--stack", "1", "--parallel", "2")


def test_a_failing_seed_side_by_side_is_recorded_and_fails_the_job(digits, tmp_path):
    cell = tmp_path / "cell"
    (cell / "seed1" / "checkpoints").mkdir(parents=True)
    (cell / "seed1" / "checkpoints" / "last.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit, match=r"seed\(s\) 1 of .* failed"):
        train_job(digits, cell, [0, 1], "--parallel", "2")
    assert "is unreadable" in json.loads((cell / "seed1" / "failed.json").read_text())["error"]
    assert (cell / "seed0" / "metrics.json").exists() and not (cell / "seeds.json").exists()


def test_a_fresh_admin_net_is_profiled_before_its_first_snapshot(digits, tmp_path):
    """The epoch-0 snapshot of an Admin run holds the profiled w (the second block's is not 1);
    BN's running statistics are those of a fresh net until training moves them."""
    train(spec(variant="admin", args={}, depth=14, arch="preact_resnet14", epochs=1, snapshots=1), digits, tmp_path, device="cpu", progress=False)
    start = torch.load(models.snapshot_path(tmp_path, 0), weights_only=True)["model"]
    assert torch.all(start["blocks.0.residual.w"] == 1.0)
    assert not torch.allclose(start["blocks.1.residual.w"], torch.ones(16))
    assert torch.equal(start["blocks.0.bn1.running_mean"], torch.zeros(16))


def test_a_run_that_keeps_snapshots_keeps_its_weights_after_the_first_step(digits, tmp_path):
    """Paper 002 measures dominant flow "after the first ... iteration of training": the weights
    after one SGD step, tagged with its epoch (1 of 11 steps: digits' 1,297 images at batch 128).
    One step moves the weights off their initialisation, and less than the whole epoch does. A fresh
    start removes an earlier spec's file."""
    train(spec(epochs=1, snapshots=1), digits, tmp_path, device="cpu", progress=False)
    first = torch.load(models.first_step_path(tmp_path), weights_only=True)
    assert first["epoch"] == pytest.approx(1 / 11)
    start, end = (torch.load(models.snapshot_path(tmp_path, e), weights_only=True)["model"] for e in (0, 1))
    weight = "blocks.0.conv1.weight" if "blocks.0.conv1.weight" in start else next(k for k in start if k.endswith("weight"))

    def moved(a, b):
        return (a[weight] - b[weight]).norm().item()
    assert 0 < moved(first["model"], start) < moved(end, start)
    train(spec(epochs=1, snapshots=0, lr_milestones=[]), digits, tmp_path / "none", device="cpu", progress=False)
    assert not models.first_step_path(tmp_path / "none").exists()
    (tmp_path / "fresh" / "checkpoints").mkdir(parents=True)
    models.first_step_path(tmp_path / "fresh").write_bytes(b"stale")
    train(spec(epochs=1, snapshots=0), digits, tmp_path / "fresh", device="cpu", progress=False)
    assert not models.first_step_path(tmp_path / "fresh").exists()
