"""Paper 002's dominant gradient flow (measure/dominant_flow.py) on nets whose answer is known by hand."""

import pytest
import torch

from resrepro import models
from resrepro.measure import dominant_flow, get
from resrepro.report import figures


def identity_residual_net(depth: int) -> torch.nn.Module:
    """A residual net whose blocks compute their skip alone (weights and biases 0) on a stem whose
    output is 10 everywhere (weights 0, bias 10): every activation is positive, so every ReLU
    passes its gradient, and each block passes its input through unchanged."""
    net = models.build({"arch": "simple_net", "depth": depth, "variant": "add", "classes": 10, "in_channels": 3})
    with torch.no_grad():
        for block in net.blocks:
            block.conv.weight.zero_()
            block.conv.bias.zero_()
        net.stem.weight.zero_()
        net.stem.bias.fill_(10.0)
    return net


def test_only_the_saps_carry_gradient_through_identity_blocks():
    """Depth 5 on 8x8: block 1 (16 channels, 8x8), block 2 (32, 4x4), block 3 (64, 2x2, the final
    activation). Through the skips alone each sub-activation's gradient comes from its SAPs only.
    The stride-2 skips read 1 position in 4, so 1/4 of block 2's positions and 1/16 of block 1's
    receive gradient, all of it along the SAPs: every channel's mean ratio is infinite, and every
    channel dominant (counting positions instead would give 1/16 and 1/4)."""
    torch.manual_seed(0)
    net = identity_residual_net(5)
    x, y = torch.randn(3, 3, 8, 8), torch.tensor([0, 3, 9])
    assert dominant_flow.dominant_fractions(net, x, y).tolist() == pytest.approx([1.0, 1.0])
    deeper = identity_residual_net(8)
    assert dominant_flow.dominant_fractions(deeper, x, y).tolist() == pytest.approx([1.0] * 5)


class TwoChannels(torch.nn.Module):
    """Two blocks of 1x1 convs on 2 channels and 2 positions: block 1 the identity, block 2 mixes
    by W (no bias) and scales its output channel c at position p by S[c, p]; a^L = the mean over
    positions; the classifier's rows (1, 1) and (-1, -1) give |G_0| = |G_1|. So what reaches
    channel i of block 1 from final channel j at p is |W[j, i]| S[j, p] |G| / 2."""

    skip_repeats_channels = True

    def __init__(self, w, s):
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Conv2d(2, 2, 1, bias=False), torch.nn.Conv2d(2, 2, 1, bias=False)])
        self.fc = torch.nn.Linear(2, 2, bias=False)
        self.register_buffer("s", torch.tensor(s)[None, :, None, :])
        with torch.no_grad():
            self.blocks[0].weight.copy_(torch.eye(2)[:, :, None, None])
            self.blocks[1].weight.copy_(torch.tensor(w)[:, :, None, None])
            self.fc.weight.copy_(torch.tensor([[1.0, 1.0], [-1.0, -1.0]]))
        self.blocks[1].register_forward_hook(lambda module, args, output: output * self.s)

    def forward(self, x):
        h = x
        for block in self.blocks:
            h = block(h)
        return self.fc(h.mean(dim=(2, 3)))


@pytest.mark.parametrize("w, s, expected", [
    # channel 0: along its SAP 1 x (1, 1), from channel 1 2 x (1, 0.1): ratios 0.5 and 5, mean 2.75:
    # dominant (one position of two by position); channel 1: 0.5 x (1, 0.1) against 1 x (1, 1):
    # ratios 0.5 and 0.05, not dominant
    ([[1.0, 1.0], [2.0, 0.5]], [[1.0, 1.0], [1.0, 0.1]], 0.5),
    # channel 1 as channel 0 now (3 x (1, 0.1) against 1 x (1, 1): ratios 3 and 0.3, mean 1.65): both
    ([[1.0, 1.0], [2.0, 3.0]], [[1.0, 1.0], [1.0, 0.1]], 1.0),
    # channel 0's ratios 0.4 and 4 (mean 2.2) but 0.9 and 0.09 for channel 1: channel 0 alone
    ([[0.8, 1.0], [2.0, 0.9]], [[1.0, 1.0], [1.0, 0.1]], 0.5),
])
def test_a_sub_activation_is_a_whole_channel_dominant_on_its_mean_ratio(w, s, expected):
    """Inequality 5 averages the ratio over a feature map's positions, and equation 13 counts
    channels: the fraction of block 1's two channels that pass, by construction."""
    net = TwoChannels(w, s)
    x, y = torch.rand(3, 2, 1, 2) + 0.5, torch.tensor([0, 1, 0])
    assert dominant_flow.dominant_fractions(net, x, y).tolist() == pytest.approx([expected])


class ThreeChannels(torch.nn.Module):
    """Block 1 the identity on 3 channels, block 2 mixes them by W (1x1, no bias), a^L the mean over
    positions, the classifier's rows (1, 1, -1) and (-1, -1, 1): G = g (1, 1, -1) for a g per
    example. What reaches channel i of block 1 from final channel j is W[j, i] G_j / positions."""

    skip_repeats_channels = True

    def __init__(self, w):
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Conv2d(3, 3, 1, bias=False), torch.nn.Conv2d(3, 3, 1, bias=False)])
        self.fc = torch.nn.Linear(3, 2, bias=False)
        with torch.no_grad():
            self.blocks[0].weight.copy_(torch.eye(3)[:, :, None, None])
            self.blocks[1].weight.copy_(torch.tensor(w)[:, :, None, None])
            self.fc.weight.copy_(torch.tensor([[1.0, 1.0, -1.0], [-1.0, -1.0, 1.0]]))

    def forward(self, x):
        h = x
        for block in self.blocks:
            h = block(h)
        return self.fc(h.mean(dim=(2, 3)))


def test_the_other_sources_are_summed_with_their_signs():
    """W's first column (1, 1, 1): channel 0 gets G_0 along its SAP and G_1 + G_2 = g - g = 0 from
    the others, which cancel: dominant (x / 0). Channels 1 and 2 get their own final channel's alone.
    All three pass; summing the others' magnitudes (|g| + |g| against |g|) would fail channel 0."""
    net = ThreeChannels([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    x, y = torch.rand(4, 3, 1, 2) + 0.5, torch.tensor([0, 1, 0, 1])
    assert dominant_flow.dominant_fractions(net, x, y).tolist() == pytest.approx([1.0])
    # the others no longer cancel (G_2 from a weight of -1: g + g against g): channel 0 fails
    net = ThreeChannels([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [-1.0, 0.0, 1.0]])
    assert dominant_flow.dominant_fractions(net, x, y).tolist() == pytest.approx([2 / 3])


def test_a_block_that_mixes_every_channel_equally_leaves_no_dominant_flow():
    """Make the last block's conv add every input channel at its centre tap with weight 1 (and its
    skip with it: the plain form has 2 on the diagonal). The gradient reaching channel i of block 2
    from final channel j is then G_j (j != i) or 2 G_j (j = i): along the SAP 2|G_i| against the sum
    of 63 others. With every G_j alike (the classifier's weights all 1 in one row), 2 < 63."""
    net = identity_residual_net(8)
    with torch.no_grad():
        net.blocks[-1].conv.weight.zero_()
        net.blocks[-1].conv.weight[:, :, 1, 1] = 1.0
        net.fc.weight.zero_()
        net.fc.weight[0] = 1.0
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([1, 2])
    assert dominant_flow.dominant_fractions(net, x, y)[-1].item() == 0.0


def test_a_residual_net_at_init_has_more_dominant_flow_than_a_plain_one_at_every_layer():
    """The paper's Figure 12 (a) at the first iteration, as a property of the two inits."""
    data = {"train_x": torch.randint(0, 255, (16, 3, 8, 8), generator=torch.Generator().manual_seed(0), dtype=torch.uint8),
            "train_y": torch.arange(16) % 10, "mean": [0.5] * 3, "std": [0.25] * 3}
    frames = {}
    for variant in ("plain", "add"):
        torch.manual_seed(1)
        net = models.build({"arch": "simple_net", "depth": 8, "variant": variant, "classes": 10, "in_channels": 3})
        frames[variant] = dominant_flow.measure_dominant_flow(net, data, {"examples": 16}, torch.device("cpu"))
    assert list(frames["add"].columns) == ["block", "quantity", "value"] and set(frames["add"]["quantity"]) == {dominant_flow.FRACTION}
    plain, residual = (frames[v].set_index("block")["value"] for v in ("plain", "add"))
    assert list(plain.index) == [1, 2, 3, 4, 5]
    assert (residual > plain).all() and ((plain >= 0) & (residual <= 1)).all()
    summary = get("dominant_flow").summarize(frames["add"].assign(epoch=0))
    assert summary.startswith("epoch 0: mean fraction") and "over 5 blocks" in summary
    first_step = get("dominant_flow").summarize(frames["add"].assign(epoch=1 / 391))
    assert first_step.startswith("after the first step: mean fraction")


def test_a_per_block_figure_of_two_snapshots_draws_a_line_for_each(monkeypatch):
    import pandas as pd

    drawn = {}
    monkeypatch.setattr(figures, "to_png", lambda fig: drawn.setdefault("fig", fig) and b"png")
    rows = pd.DataFrame([{"figure": "f", "label": "ResNet-20", "run": "r", "epoch": e, "block": b, "quantity": "q", "value": 0.1 * b}
                         for e in (0, 1 / 391, 20) for b in (1, 2, 3)])
    figures.per_block(rows, "f")
    assert {line.get_label() for line in drawn["fig"].axes[0].get_lines()} == {
        "ResNet-20, epoch 0 (1 run)", "ResNet-20, after the first step (1 run)", "ResNet-20, epoch 20 (1 run)"}


def test_a_net_without_signal_activation_paths_is_refused_by_name():
    with pytest.raises(ValueError, match="measures paper 002's nets .*, not Linear"):
        dominant_flow.measure_dominant_flow(torch.nn.Linear(2, 2), {}, {"examples": 1}, torch.device("cpu"))


def test_the_measure_job_reads_the_weights_after_the_first_step_and_after_training(tmp_path, monkeypatch):
    """The two snapshots the paper measures: the first step's (its epoch 1/391) and the last
    (epoch 3), each file read once; the initialisation's (epoch 0) is not read. A run without the
    first step's file is refused by name."""
    from resrepro import files
    from resrepro.measure.run import run_measurement

    spec = {"arch": "simple_net", "depth": 8, "variant": "add", "classes": 10, "in_channels": 3}
    run = tmp_path / "run"
    for epoch, path in ((0, models.snapshot_path(run, 0)), (3, models.snapshot_path(run, 3)), (1 / 391, models.first_step_path(run))):
        torch.manual_seed(len(str(epoch)))
        files.save_torch(path, {"model": models.build(spec).state_dict(), "model_spec": spec, "epoch": epoch})
    torch.save({"train_x": torch.randint(0, 255, (8, 3, 8, 8), dtype=torch.uint8), "train_y": torch.arange(8), "mean": [0.5] * 3,
                "std": [0.25] * 3, "test_x": torch.zeros(1, 3, 8, 8, dtype=torch.uint8), "test_y": torch.zeros(1, dtype=torch.long),
                "classes": [str(c) for c in range(10)], "name": "tiny", "source": "test"}, tmp_path / "d.pt")
    read, load = [], models.load_checkpoint
    monkeypatch.setattr(models, "load_checkpoint", lambda path: read.append(path.name) or load(path))
    run_measurement("dominant_flow", run, tmp_path / "d.pt", {"examples": 8}, tmp_path / "out.csv", device="cpu")
    import pandas as pd

    assert sorted(pd.read_csv(tmp_path / "out.csv")["epoch"].unique()) == pytest.approx([1 / 391, 3])
    assert sorted(read) == ["epoch0003.pt", "step0001.pt"]
    models.first_step_path(run).unlink()
    with pytest.raises(ValueError, match="no weights after its first step"):
        run_measurement("dominant_flow", run, tmp_path / "d.pt", {"examples": 8}, tmp_path / "out.csv", device="cpu")
