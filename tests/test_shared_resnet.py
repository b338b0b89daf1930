"""Paper 003 Sec. 4.5: ResNets sharing their top blocks (models/shared_resnet.py) and the norms
that sharing makes explode (measure/stage_norms.py)."""

import pytest
import torch

from resrepro import models, residual
from resrepro.measure.blocks import residual_blocks
from resrepro.measure.stage_norms import FORWARD, GRADIENT, measure_stage_norms, summarize_stage_norms
from resrepro.models.shared_resnet import SIZES

from test_blocks import data
from test_unroll import Block, Net


def shared(strategy: str, size: str = "110", classes: int = 10):
    return models.build({"arch": f"shared_resnet_{strategy}", "size": size, "variant": "add", "args": {}, "classes": classes, "in_channels": 3})


def resnet(depth: int, classes: int = 10):
    return models.build({"arch": "preact_resnet", "depth": depth, "variant": "add", "args": {}, "classes": classes, "in_channels": 3})


@pytest.mark.parametrize("size", ["110", "146", "182"])
def test_a_shared_net_has_resnet_38s_parameters_and_ubn_adds_each_steps_gamma_and_beta(size):
    """Blocks 1-5 of a stage and the shared 6th: ResNet-38's 6 blocks a stage. UBN adds two BNs'
    gamma and beta (4 C numbers) for every application after the first: (n - 6) per stage."""
    blocks = SIZES[size][0]
    for strategy in ("naive", "stats", "stats_gamma"):
        assert models.count_parameters(shared(strategy, size)) == models.count_parameters(resnet(38))
    extra = sum((blocks - 6) * 4 * c for c in (16, 32, 64))
    assert models.count_parameters(shared("ubn", size)) == models.count_parameters(resnet(38)) + extra


def test_every_application_is_a_block_of_its_own_for_the_measurements():
    assert len(residual_blocks(shared("ubn"))) == 3 * 18
    assert len(residual_blocks(shared("naive", "mini110"))) == 3 * 5


def stage_steps(net, stage: int = 2):
    """The blocks of the last stage that share their convolutions (the 6th block and above)."""
    per_stage = len(net.blocks) // 3
    return list(net.blocks)[stage * per_stage + 5 : (stage + 1) * per_stage]


@pytest.mark.parametrize("strategy, own_stats, own_affine, gamma", [("naive", False, False, 1.0), ("stats", True, False, 1.0),
                                                                     ("stats_gamma", True, False, 0.1), ("ubn", True, True, 0.1)])
def test_each_strategy_shares_what_it_says(strategy, own_stats, own_affine, gamma):
    steps = stage_steps(shared(strategy))
    first, later = steps[0], steps[1:]
    assert len(steps) == 13  # "naively shared top 13 layers"
    assert all(s.conv1 is first.conv1 and s.conv2 is first.conv2 for s in later)
    assert all((s.bn1 is first.bn1) != own_stats for s in later)
    assert all((s.bn1.weight is first.bn1.weight) != own_affine for s in later)
    assert all(torch.all(s.bn1.weight == gamma) and torch.all(s.bn2.weight == gamma) for s in steps)
    unshared = list(shared(strategy).blocks)[:5]
    assert all(torch.all(b.bn1.weight == 1.0) for b in unshared)  # the blocks of their own keep gamma 1


def test_sharing_survives_a_checkpoint():
    net = shared("stats")
    copy = shared("stats")
    copy.load_state_dict(net.state_dict())
    steps = stage_steps(copy)
    assert all(s.conv1 is steps[0].conv1 and s.bn1.weight is steps[0].bn1.weight for s in steps[1:])
    x = torch.randn(2, 3, 32, 32)
    assert torch.allclose(net.eval()(x), copy.eval()(x))


def test_an_unknown_size_is_refused_naming_the_sizes():
    with pytest.raises(ValueError, match="shared_resnet_ubn: size '38' unknown; allowed: 110, 146, 182, mini110"):
        shared("ubn", "38")


# --- stage_norms -------------------------------------------------------------------------------------


SETTINGS = {"examples": 10000, "splits": ["test"], "batch_size": 7}


def test_the_forward_ratio_is_how_much_the_blocks_amplify_h():
    """Two blocks h -> 2h: ||h|| grows 4 times; one stage, so both gradients are the same tensor's."""
    frame = measure_stage_norms(Net(Block(1.0), Block(1.0)), data(), SETTINGS, torch.device("cpu")).set_index("quantity")["value"]
    assert frame[FORWARD] == pytest.approx(4.0)
    assert frame[GRADIENT] == pytest.approx(1.0)


class Widen(torch.nn.Module):
    """A block that starts a stage: h -> (h, h) stacked on channels (skip), F = 0."""

    def __init__(self):
        super().__init__()
        self.residual = residual.build("add", 2, "conv", {})

    def forward(self, h):
        wide = torch.cat([h, h], dim=1)
        return self.residual(wide, torch.zeros_like(wide))


def test_the_gradient_ratio_reads_the_first_blocks_of_the_first_and_last_stages():
    """Block 1 maps x to 3x (F = 2x); block 2 starts the last stage. The loss reads the mean of
    the last h, 3 mean(x): dL/dx is 3 times dL/dh at block 2's input, element by element."""
    net = Net(Block(2.0), Widen(), Block(0.0))
    frame = measure_stage_norms(net, data(), SETTINGS, torch.device("cpu")).set_index("quantity")["value"]
    assert frame[GRADIENT] == pytest.approx(3.0, rel=1e-5)
    assert frame[FORWARD] == pytest.approx(3.0 * 2 ** 0.5, rel=1e-5)  # 3x, stacked twice


def test_stage_norms_measure_a_registered_resnet_on_both_splits():
    net = models.build({"arch": "preact_resnet", "depth": 14, "variant": "add", "args": {}, "classes": 2, "in_channels": 1})
    frame = measure_stage_norms(net, data(), {**SETTINGS, "splits": ["train", "test"]}, torch.device("cpu"))
    assert set(frame["split"]) == {"train", "test"} and (frame["value"] > 0).all() and frame["examples"].eq(20).all()
    assert all(p.grad is None for p in net.parameters())


def test_the_summary_reads_initialisation_the_last_snapshot_and_the_largest():
    import pandas as pd

    frame = pd.DataFrame({"split": "train", "quantity": FORWARD, "epoch": [0, 3, 6], "value": [60.0, 80.0, 1.5]})
    assert summarize_stage_norms(frame) == f"{FORWARD}, train: 60 at epoch 0, 1.5 at epoch 6, largest 80 (epoch 3)"


def test_the_last_stage_starts_at_the_first_block_of_the_last_shape():
    """Shapes 1, 1, 2, 4 channels: the last stage is block 4 alone. x -> 3x, stacked twice: the
    loss reads mean(3x), so dL/dx = 3 g / 64 per pixel and dL/dh = g / 128 at block 4's input
    (128 numbers): the ratio of norms is (3/8) / (1/sqrt(128)) = 3 sqrt(2); ||h|| grows 6 times."""
    net = Net(Block(2.0), Block(0.0), Widen(), Widen())
    frame = measure_stage_norms(net, data(), SETTINGS, torch.device("cpu"))
    assert list(frame.columns) == ["split", "quantity", "value", "examples"]
    values = frame.set_index("quantity")["value"]
    assert values[GRADIENT] == pytest.approx(3 * 2 ** 0.5, rel=1e-5)
    assert values[FORWARD] == pytest.approx(6.0, rel=1e-5)
