"""A cell's seeds trained stacked (train/stacked.py) against the same seeds trained alone
(classification.train): the same run folders, to float rounding."""

from __future__ import annotations

import csv

import pytest
import torch

from resrepro import models
from resrepro.data.digits import prepare_digits
from resrepro.data.images import load_prepared, save_prepared
from resrepro.train.classification import train
from resrepro.train.stacked import train_stacked

SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The prepared digits cut to 4 training batches and one evaluation batch: what is checked is
    that each file of a stacked run is the file of the run alone, which a few steps show as well as many."""
    full = tmp_path_factory.mktemp("data") / "digits.pt"
    prepare_digits(full)
    data = load_prepared(full)
    few = full.with_name("few.pt")
    save_prepared(few, train_x=data["train_x"][:512], train_y=data["train_y"][:512], test_x=data["test_x"][:128],
                  test_y=data["test_y"][:128], classes=data["classes"], name="digits", source="the first 512 and 128 of digits.pt")
    return few


def spec(**over):
    base = {"task": "classification", "dataset": "digits", "arch": "preact_resnet8", "model": "preact_resnet", "depth": 8, "variant": "sas",
            "args": {}, "seed": 0, "epochs": 2, "batch_size": 128, "lr": 0.1, "momentum": 0.9, "weight_decay": 2e-4,
            "lr_milestones": [1], "warmup_lr": 0.01, "warmup_iterations": 3, "warmup_min_depth": 0, "augment_pad": 1,
            "augment_flip": True, "dtype": "float64", "snapshots": 2}
    return {**base, **over}


def log(run_dir):
    with open(run_dir / "train_log.csv") as fh:
        return list(csv.DictReader(fh))


def largest_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def assert_same_runs(stacked_dirs, alone_dirs, tolerance: float):
    for stacked, alone in zip(stacked_dirs, alone_dirs):
        mine, theirs = models.load_checkpoint(stacked / "checkpoints" / "last.pt"), models.load_checkpoint(alone / "checkpoints" / "last.pt")
        assert largest_difference(mine["model"], theirs["model"]) < tolerance  # weights, BN statistics and counters, SAS's gates
        for index, entries in theirs["optimizer"]["state"].items():
            assert largest_difference(mine["optimizer"]["state"][index], entries) < tolerance
        assert mine["step"] == theirs["step"] and mine["epoch"] == theirs["epoch"]
        assert torch.equal(mine["generator"], theirs["generator"])  # the same batches and crops drawn
        assert mine["model_spec"] == theirs["model_spec"] and mine["spec"] == theirs["spec"]
        rows, expected = log(stacked), log(alone)
        assert [r["test_error"] for r in rows] == [r["test_error"] for r in expected]
        for row, other in zip(rows, expected):
            for key in ("train_loss", "train_error", "test_loss", "lr", "step"):
                assert float(row[key]) == pytest.approx(float(other[key]), rel=tolerance, abs=tolerance)
        def kept(run_dir):
            return [p.name for _, p in models.snapshots(run_dir)] + [p.name for p in [models.first_step_path(run_dir)] if p.exists()]

        snapshots = kept(stacked)
        assert snapshots == kept(alone)
        for name in snapshots:
            assert largest_difference(models.load_checkpoint(stacked / "checkpoints" / name)["model"],
                                      models.load_checkpoint(alone / "checkpoints" / name)["model"]) < tolerance


def test_seeds_trained_stacked_are_the_runs_trained_alone(digits, tmp_path):
    """float64, SAS with warm-up, a decay milestone, crops and flips, snapshots and the first step's
    weights: every file of each run folder matches the run trained alone to 1e-9."""
    stacked = [tmp_path / "stacked" / f"seed{s}" for s in SEEDS]
    alone = [tmp_path / "alone" / f"seed{s}" for s in SEEDS]
    metrics = train_stacked([spec(seed=s) for s in SEEDS], digits, stacked, device="cpu", progress=False)
    for s, run_dir in zip(SEEDS, alone):
        train(spec(seed=s), digits, run_dir, device="cpu", progress=False)
    assert_same_runs(stacked, alone, 1e-9)
    assert len(list((stacked[0] / "checkpoints").glob("*.pt"))) == 5  # last, epochs 0, 1, 2 and the first step
    assert [m["seed"] for m in metrics] == list(SEEDS) and all(m["speed"]["stacked_runs"] == 3 for m in metrics)
    # the seeds differ: a stack that trained one run three times would not
    assert len({log(d)[-1]["train_loss"] for d in stacked}) == 3


def test_a_stacked_job_resumes_from_the_checkpoints_alone_or_stacked(digits, tmp_path):
    """Seed 0 trained alone to the end, seed 1 alone for one epoch, seed 2 not at all: stacked,
    each continues from where it stands (the groups by step) to the runs trained alone."""
    dirs = [tmp_path / "job" / f"seed{s}" for s in SEEDS]
    train(spec(seed=0), digits, dirs[0], device="cpu", progress=False)
    alone = [tmp_path / "alone" / f"seed{s}" for s in SEEDS]
    for s, run_dir in zip(SEEDS, alone):
        train(spec(seed=s), digits, run_dir, device="cpu", progress=False)
    # seed 1's first epoch: the full spec's run stopped after epoch 1 (its checkpoint of that epoch)
    half = [tmp_path / "half"]
    from resrepro.train.time_limit import TimeLimitReached

    with pytest.raises(TimeLimitReached):
        train(spec(seed=1), digits, half[0], device="cpu", progress=False, stop_by=0.0)
    dirs[1].parent.mkdir(parents=True, exist_ok=True)
    half[0].rename(dirs[1])
    metrics = train_stacked([spec(seed=s) for s in SEEDS], digits, dirs, device="cpu", progress=False)
    assert_same_runs(dirs, alone, 1e-9)
    # seed 0 was finished (not trained now); seeds 1 and 2 stood at different steps: each trained in a group of one
    assert [m["speed"].get("stacked_runs") for m in metrics] == [None, 1, 1]


def test_a_diverging_seed_stops_as_alone_and_the_others_go_on(digits, tmp_path, monkeypatch):
    """Seed 1's classifier starts at infinity (its loss is NaN at the first step): it stops there,
    recorded as alone, and seeds 0 and 2 are the runs trained alone to 1e-9."""
    from resrepro.train import classification, stacked

    def poisoned(spec, *args, **kwargs):
        run = prepare_run(spec, *args, **kwargs)
        if spec.seed == 1:
            with torch.no_grad():
                run.model.fc.weight.fill_(float("inf"))
        return run

    prepare_run = classification.prepare_run
    monkeypatch.setattr(classification, "prepare_run", poisoned)
    monkeypatch.setattr(stacked, "prepare_run", poisoned)
    over = {"snapshots": 0}
    dirs = [tmp_path / "stacked" / f"seed{s}" for s in SEEDS]
    alone = [tmp_path / "alone" / f"seed{s}" for s in SEEDS]
    metrics = train_stacked([spec(seed=s, **over) for s in SEEDS], digits, dirs, device="cpu", progress=False)
    alone_metrics = [train(spec(seed=s, **over), digits, run_dir, device="cpu", progress=False) for s, run_dir in zip(SEEDS, alone)]
    assert [m["diverged"] for m in metrics] == [m["diverged"] for m in alone_metrics] == [False, True, False]
    assert metrics[1]["diverged_at"] == alone_metrics[1]["diverged_at"] == {"epoch": 1, "step": 1, "loss": "nan"}
    assert_same_runs([dirs[0], dirs[2]], [alone[0], alone[2]], 1e-9)
    kept = models.load_checkpoint(dirs[1] / "checkpoints" / "last.pt")
    assert kept["diverged"] == alone_metrics[1]["diverged_at"] and kept["step"] == 1
    assert torch.isinf(kept["model"]["fc.weight"]).all()  # the weights before the step, as alone


def test_stacked_runs_train_in_nchw_whatever_the_recipe_asks(digits, tmp_path):
    """Under vmap a tensor cannot report channels-last contiguity, which cuDNN's batch norm asks
    when torch.compile traces a stack on a GPU: a stack keeps its runs in NCHW (speed.stacked)."""
    specs = [spec(seed=seed, epochs=1, dtype="float32", channels_last=True) for seed in (0, 1)]
    stacked = train_stacked(specs, digits, [tmp_path / str(s["seed"]) for s in specs], device="cpu", progress=False)
    assert [m["speed"]["channels_last"] for m in stacked] == [False, False]
    assert train(specs[0], digits, tmp_path / "alone", device="cpu", progress=False)["speed"]["channels_last"] is True
