"""Which BatchNorm statistics a snapshot is measured with (measure/run.py): the batch's for one
taken before its net finished an epoch, the running ones after. Hand values on a BN layer, and
every measurement that reads such snapshots checked against a net put in that mode another way."""

import numpy as np
import pandas as pd
import pytest
import torch

from resrepro import files, models
from resrepro.measure import get
from resrepro.measure.run import run_measurement, statistics_for, use_batch_statistics


def test_a_batchnorm_layer_normalises_by_the_batch_in_eval_mode_and_keeps_its_running_statistics():
    """x = (1, 3; 5, 7) on one channel: the batch's mean 4 and variance 5 give (x - 4) / sqrt(5);
    the initial running statistics (0, 1) would give x / sqrt(1 + eps), x itself."""
    bn = torch.nn.BatchNorm2d(1).eval()
    x = torch.tensor([[[[1.0, 3.0]]], [[[5.0, 7.0]]]])
    assert torch.allclose(bn(x), x / (1 + bn.eps) ** 0.5)
    assert use_batch_statistics(torch.nn.Sequential(bn, torch.nn.ReLU())) == 1
    assert torch.allclose(bn(x), (x - 4.0) / (5.0 + bn.eps) ** 0.5)
    assert bn.running_mean is None and bn.running_var is None  # nothing left to update


def test_snapshots_of_the_first_epoch_take_the_batchs_statistics():
    assert [statistics_for(e) for e in (0, 1 / 391, 0.99, 1, 50)] == ["batch", "batch", "batch", "running", "running"]


class BatchStatistics(torch.nn.Module):
    """BatchNorm written out: each channel normalised by the mean and (biased) variance of the batch
    it is fed, then scaled and shifted by the layer's own weight and bias, in any mode."""

    def __init__(self, bn: torch.nn.BatchNorm2d):
        super().__init__()
        self.weight, self.bias, self.eps = bn.weight, bn.bias, bn.eps

    def forward(self, x):
        mean, var = x.mean(dim=(0, 2, 3), keepdim=True), x.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
        return (x - mean) / (var + self.eps).sqrt() * self.weight[None, :, None, None] + self.bias[None, :, None, None]


def reference(model: torch.nn.Module, statistics: str) -> torch.nn.Module:
    """The model with every BatchNorm written out on the batch's statistics, or left to its running
    ones (eval mode): what each snapshot must be measured as."""
    model.eval()
    if statistics == "batch":
        for name, module in list(model.named_modules()):
            for child, bn in list(module.named_children()):
                if isinstance(bn, torch.nn.BatchNorm2d):
                    setattr(module, child, BatchStatistics(bn))
    return model


def data_file(tmp_path):
    g = torch.Generator().manual_seed(0)
    path = tmp_path / "d.pt"
    torch.save({"train_x": torch.randint(0, 255, (16, 3, 8, 8), generator=g, dtype=torch.uint8), "train_y": torch.arange(16) % 10,
                "test_x": torch.randint(0, 255, (16, 3, 8, 8), generator=g, dtype=torch.uint8), "test_y": torch.arange(16) % 10,
                "mean": [0.5] * 3, "std": [0.25] * 3, "classes": [str(c) for c in range(10)], "name": "tiny", "source": "test"}, path)
    return path


def trained_running_statistics(model: torch.nn.Module) -> None:
    """Running statistics unlike the initial (0, 1), as a trained net's are."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)


@pytest.mark.parametrize("measurement, spec, settings", [
    ("stage_norms", {"arch": "preact_resnet", "depth": 8, "variant": "add", "classes": 10, "in_channels": 3},
     {"examples": 16, "batch_size": 8, "splits": ["train", "test"]}),
    ("over_training", {"arch": "preact_resnet", "depth": 8, "variant": "add", "classes": 10, "in_channels": 3},
     {"examples": 16, "batch_size": 8, "splits": ["test"]}),
    ("dominant_flow", {"arch": "resnet_cifar", "depth": 8, "variant": "add", "classes": 10, "in_channels": 3}, {"examples": 16}),
])
def test_each_snapshot_measurement_states_its_statistics(tmp_path, measurement, spec, settings):
    """The first snapshot (initialisation, or the first step's) is measured as the net normalised
    by each batch, the last as the net in eval mode: run_measurement's rows equal the measurement
    of the reference nets, and differ from those of the other mode."""
    run = tmp_path / "run"
    torch.manual_seed(0)
    first = models.build(spec)
    last = models.build(spec)
    trained_running_statistics(last)
    early = (1 / 391, models.first_step_path(run)) if measurement == "dominant_flow" else (0, models.snapshot_path(run, 0))
    for (epoch, path), model in ((early, first), ((3, models.snapshot_path(run, 3)), last)):
        files.save_torch(path, {"model": model.state_dict(), "model_spec": spec, "epoch": epoch})
    settings = {**get(measurement).defaults, **settings}
    run_measurement(measurement, run, data_file(tmp_path), settings, tmp_path / "out.csv", device="cpu")
    out = pd.read_csv(tmp_path / "out.csv")
    data = torch.load(tmp_path / "d.pt", weights_only=False)
    measure = get(measurement).measure
    cpu = torch.device("cpu")
    for epoch, model, mode, other in ((early[0], first, "batch", "running"), (3, last, "running", "batch")):
        mine = out[np.isclose(out["epoch"], epoch)].drop(columns="epoch").reset_index(drop=True)
        copy = models.build(spec)
        copy.load_state_dict(model.state_dict())
        expected = measure(reference(copy, mode), data, settings, cpu)
        assert mine["value"].to_numpy() == pytest.approx(expected["value"].to_numpy(), rel=1e-5, abs=1e-7)
        copy = models.build(spec)
        copy.load_state_dict(model.state_dict())
        unlike = measure(reference(copy, other), data, settings, cpu)
        assert mine["value"].to_numpy() != pytest.approx(unlike["value"].to_numpy(), rel=1e-3, abs=1e-5)


def shared(strategy: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return models.build({"arch": f"shared_resnet_{strategy}", "size": "mini110", "variant": "add", "args": {}, "classes": 10, "in_channels": 3})


@pytest.mark.parametrize("statistics", ["batch", "running"])
def test_at_initialisation_the_ablations_pairs_are_one_net(statistics):
    """Naive sharing and each application's own BN statistics differ only in statistics no batch
    has yet estimated, and gamma 0.1 and UBN only in gamma/beta that start alike: at
    initialisation each pair computes the same function, under either statistics. So no check
    may order them there (iter-f9-norms reads the first snapshot after it)."""
    x = torch.randn(8, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    outputs = {}
    for strategy in ("naive", "stats", "stats_gamma", "ubn"):
        net = shared(strategy).eval()
        if statistics == "batch":
            use_batch_statistics(net)
        with torch.no_grad():
            outputs[strategy] = net(x)
    assert torch.equal(outputs["naive"], outputs["stats"]) and torch.equal(outputs["stats_gamma"], outputs["ubn"])
    assert not torch.allclose(outputs["naive"], outputs["stats_gamma"])


def test_no_check_orders_nets_that_are_one_net_at_initialisation_there():
    from fake_runs import FIGURES

    from resrepro.experiments import load_figures

    check = load_figures(FIGURES)["iter-f9-norms"]["checks"][0]
    assert check["test"] == "ordered" and {"naive sharing", "own BN statistics"} <= set(check["cells"])
    assert check["select"]["epoch"] not in (0, "min", [0])
