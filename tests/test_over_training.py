"""Paper 003's figures over training (measure/over_training.py): the snapshots a run keeps, the
last stage's blocks measured on nets whose answers are known by hand, and a figure that draws
some of its measurement's quantities."""

import pandas as pd
import pytest
import torch
import yaml

from resrepro import experiments, models
from resrepro.analysis.aggregate import aggregate_figures
from resrepro.data.digits import prepare_digits
from resrepro.measure import over_training
from resrepro.measure.over_training import ACCURACY, COSINE, RATIO, last_stage, measure_last_stage, summarize_over_training
from resrepro.measure.run import run_measurement
from resrepro.specs import ModelSpec
from resrepro.report import figures
from resrepro.residual import ConfigError
from resrepro.models import snapshots
from resrepro.recipes import snapshot_epochs
from resrepro.train.checkpoint import save_snapshot
from resrepro.train.classification import train

from test_blocks import Toy, data, sign_labels
from test_train import spec

SETTINGS = {"examples": 10000, "splits": ["test"], "batch_size": 7}
CPU = torch.device("cpu")


def of(frame: pd.DataFrame, quantity: str) -> dict[int, float]:
    return frame[frame["quantity"] == quantity].set_index("block")["value"].to_dict()


# --- snapshots ------------------------------------------------------------------------------------


@pytest.mark.parametrize("epochs, count, expected", [(200, 4, [0, 50, 100, 150, 200]), (6, 6, [0, 1, 2, 3, 4, 5, 6]),
                                                     (3, 10, [0, 1, 2, 3]), (10, 3, [0, 3, 7, 10]), (5, 0, [])])
def test_snapshots_are_initialisation_and_evenly_spaced_epochs_ending_at_the_last(epochs, count, expected):
    assert snapshot_epochs(epochs, count) == expected


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "digits.pt"
    prepare_digits(path)
    return path


def test_a_run_keeps_the_snapshots_its_recipe_asks_for(digits, tmp_path):
    s = spec(epochs=2, snapshots=2)
    train(s, digits, tmp_path, device="cpu", progress=False)
    kept = snapshots(tmp_path)
    assert [epoch for epoch, _ in kept] == [0, 1, 2]
    last = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)["model"]
    final = torch.load(kept[-1][1], weights_only=True)
    assert all(torch.equal(last[k], final["model"][k]) for k in last)  # the last snapshot is the trained net
    torch.manual_seed(s["seed"])
    fresh = models.build(final["model_spec"]).state_dict()
    first = torch.load(kept[0][1], weights_only=True)["model"]
    assert all(torch.equal(fresh[k], first[k]) for k in fresh)  # epoch 0: the weights training started from
    assert not torch.equal(first["fc.weight"], final["model"]["fc.weight"])


def test_a_run_without_snapshots_keeps_none_and_a_fresh_start_drops_an_earlier_specs(digits, tmp_path):
    train(spec(epochs=1, snapshots=1), digits, tmp_path, device="cpu", progress=False)
    assert len(snapshots(tmp_path)) == 2
    train(spec(epochs=1), digits, tmp_path, device="cpu", progress=False)  # another spec: trains afresh
    assert snapshots(tmp_path) == []


# --- the last stage's blocks ------------------------------------------------------------------------


def test_the_last_stage_is_the_blocks_shaped_as_the_last():
    assert last_stage([(16, 8, 8), (16, 8, 8), (32, 4, 4), (32, 4, 4)]) == [2, 3]
    assert last_stage([(4,), (4,)]) == [0, 1]


def test_accuracy_is_the_final_classifiers_after_each_block():
    """Block 2 flips the sign (F = -2h), and the labels are what the flipped net says: the
    classifier after block 1 is wrong on every example, after block 2 right on every one."""
    frame = measure_last_stage(Toy([0.0, -2.0]), data(30, sign_labels), SETTINGS, CPU)
    assert of(frame, ACCURACY) == {1: 0.0, 2: 100.0}
    assert set(frame["quantity"]) == {ACCURACY, COSINE, RATIO}


def test_the_cosine_takes_the_gradient_of_the_classifier_plugged_after_the_block():
    """F_1 = +1 and labels 0: the classifier right after block 1 gives cos -1; the whole net, whose
    block 2 maps h to -h, would give +1 (grad_cosine, paper 003 Fig. 4)."""
    frame = measure_last_stage(Toy([0.0, -2.0], [1.0, 0.0]), data(), SETTINGS, CPU)
    assert of(frame, COSINE)[1] == pytest.approx(-1.0, abs=1e-6)


def test_the_l2_ratio_is_the_whole_nets():
    frame = measure_last_stage(Toy([2.0, -0.5]), data(), SETTINGS, CPU)
    assert of(frame, RATIO) == pytest.approx({1: 2.0, 2: 0.5})


def test_a_resnet_is_measured_on_its_last_stage_numbered_as_in_the_whole_net():
    net = models.build({"arch": "preact_resnet", "depth": 14, "variant": "add", "args": {}, "classes": 2, "in_channels": 1})
    frame = measure_last_stage(net, data(), {**SETTINGS, "splits": ["train", "test"]}, CPU)
    assert sorted(set(frame["block"])) == [5, 6] and set(frame["split"]) == {"train", "test"}
    assert frame["examples"].eq(20).all() and frame["value"].notna().all()
    assert all(p.grad is None for p in net.parameters())


def snapshot_run(tmp_path, epochs=(0, 3)):
    torch.manual_seed(0)
    for epoch in epochs:
        model_spec = ModelSpec(arch="preact_resnet", depth=8, variant="add", args={}, classes=2, in_channels=1)
        save_snapshot(tmp_path, epoch, models.build(model_spec), model_spec)
    return tmp_path


def test_the_measure_job_reads_every_snapshot_in_order_and_tags_its_epoch(tmp_path, monkeypatch):
    monkeypatch.setattr("resrepro.measure.run.load_data", lambda task, path: data())
    run_measurement("over_training", snapshot_run(tmp_path), tmp_path / "data.pt", SETTINGS, tmp_path / "out.csv", device="cpu")
    out = pd.read_csv(tmp_path / "out.csv")
    assert list(dict.fromkeys(out["epoch"])) == [0, 3]
    assert len(out) == 2 * 3 * 1  # 2 snapshots x 3 quantities x the last stage's one block


def test_a_run_without_snapshots_is_refused_saying_what_to_set(tmp_path):
    with pytest.raises(ValueError, match="kept no snapshots; its recipe needs `snapshots: N`"):
        run_measurement("over_training", tmp_path, tmp_path / "data.pt", SETTINGS, tmp_path / "out.csv", device="cpu")


# --- what a figure reads ---------------------------------------------------------------------------


def course(values: dict[tuple[int, int], float], quantity: str = COSINE, split: str = "test") -> pd.DataFrame:
    return pd.DataFrame([{"split": split, "epoch": e, "block": b, "quantity": quantity, "value": v} for (e, b), v in values.items()])


def test_the_summary_reads_the_last_epoch_across_blocks_and_the_mean_over_training():
    frame = course({(0, 1): 0.2, (0, 2): 0.4, (5, 1): -0.1, (5, 2): -0.3, (9, 1): -0.2, (9, 2): 0.0}, COSINE)
    text = summarize_over_training(frame)
    assert text.startswith(f"{COSINE}, test: at epoch 9 block 1 -0.2 -> block 2 0 (Spearman rho with depth +1.00)")
    assert "mean over blocks 0.3 at epoch 0 -> -0.1" in text
    assert text.endswith("negative at 3 of 4 (block, epoch) points after initialisation")  # epoch 0 is not counted


def test_the_summary_joins_quantities_in_a_fixed_order_and_counts_negatives_only_for_the_cosine():
    frame = pd.concat([course({(0, 1): 10.0, (2, 1): 50.0, (0, 2): 10.0, (2, 2): 90.0}, ACCURACY),
                       course({(0, 1): 0.5, (2, 1): 0.2, (0, 2): 0.5, (2, 2): 0.1}, RATIO)])
    parts = summarize_over_training(frame).split("; ")
    assert parts[0].startswith(f"{ACCURACY}, test: at epoch 2 block 1 50 -> block 2 90")
    assert parts[1] == "mean over blocks 10 at epoch 0 -> 70"
    assert parts[2].startswith(f"{RATIO}, test:") and "negative" not in "; ".join(parts)


def figure_file(tmp_path, **over) -> list:
    entry = {"paper": "iter", "caption": "c", "claim": "k", "measurement": "over_training",
             "cells": [{"label": "net", "dataset": "cifar10", "depth": 110, "variant": "add"}], **over}
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump({"iter-fx": entry}))
    return [path]


def test_a_figure_may_draw_some_of_its_measurements_quantities_and_no_other(tmp_path):
    assert experiments.load_figures(figure_file(tmp_path, quantities=[RATIO]))["iter-fx"]["quantities"] == [RATIO]
    for wrong in (["l2"], [], RATIO):
        with pytest.raises(ConfigError, match=r"iter-fx.quantities: expected a list of (over_training|the measurement)'s quantities"):
            experiments.load_figures(figure_file(tmp_path, quantities=wrong))
    with pytest.raises(ConfigError, match="l2_ratio writes no named quantities"):
        experiments.load_figures(figure_file(tmp_path, measurement="l2_ratio", quantities=[RATIO]))


def test_the_figures_data_and_summary_hold_only_its_quantities(tmp_path):
    run = "classification/digits/preact_resnet8/default/add/seed0"
    (tmp_path / run / "measure").mkdir(parents=True)
    pd.concat([course({(0, 1): 0.3, (1, 1): -0.2}, COSINE), course({(0, 1): 0.5, (1, 1): 0.4}, RATIO)]).to_csv(
        tmp_path / run / "measure" / "over_training.csv", index=False)
    runs = pd.DataFrame([{"run": run, "status": "ok"}])
    measures = [{"figure": "iter-fx", "cell": 0, "label": "net", "measurement": "over_training", "settings": {}, "quantities": [RATIO], "runs": [run]}]
    out = aggregate_figures(measures, tmp_path, runs)
    assert set(out["figures"]["quantity"]) == {RATIO}
    assert out["figure_cells"]["summary"][0].startswith(RATIO) and COSINE not in out["figure_cells"]["summary"][0]
    assert out["figure_cells"]["kind"][0] == "per_epoch_block"
    png = figures.DRAWINGS["per_epoch_block"](out["figures"], "iter-fx")
    assert png.startswith(b"\x89PNG")


def test_the_measurement_declares_the_quantities_it_writes():
    from resrepro import catalog

    assert catalog.MEASUREMENTS["over_training"].quantities == over_training.QUANTITIES


def test_the_cosine_takes_the_gradient_at_h_with_the_classifier_right_after_it_not_after_the_block():
    """Appendix C plugs the classifier "right after each hidden representation": L_1 on h_1, the
    block's input. Block 1 maps h to -h (F = -2h), labels 0, logits (s, -s), s = mean(h): dL/dh_1
    is a negative constant, so cos(F_1, dL/dh_1) = sum(h) / (||h|| sqrt(N)) per example. With the
    classifier after block 1 the gradient would pass through it and flip: the opposite sign."""
    sample = data()
    h = ((sample["test_x"].double() / 255 - 0.5) / 0.25).flatten(1)
    expected = (h.sum(1) / (h.norm(dim=1) * h.shape[1] ** 0.5)).mean().item()
    frame = measure_last_stage(Toy([-2.0, 0.0]), sample, SETTINGS, CPU)
    assert abs(expected) > 0.01 and of(frame, COSINE)[1] == pytest.approx(expected, rel=1e-5)

