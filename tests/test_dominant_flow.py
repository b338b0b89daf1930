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
    activation). Through the skips alone each sub-activation's gradient comes from its SAPs only:
    dominant wherever any gradient arrives. The stride-2 skips read 1 position in 4, so 1/4 of
    block 2's positions and 1/16 of block 1's receive gradient; the rest receive none (not dominant)."""
    torch.manual_seed(0)
    net = identity_residual_net(5)
    x, y = torch.randn(3, 3, 8, 8), torch.tensor([0, 3, 9])
    assert dominant_flow.dominant_fractions(net, x, y).tolist() == pytest.approx([1 / 16, 1 / 4])
    deeper = identity_residual_net(8)  # two blocks a group: the first group's both at 1/16, the second's at 1/4, then 1
    assert dominant_flow.dominant_fractions(deeper, x, y).tolist() == pytest.approx([1 / 16, 1 / 16, 1 / 4, 1 / 4, 1.0])


def test_a_block_that_mixes_every_channel_equally_leaves_no_dominant_flow():
    """Make the last block's conv add every input channel at its centre tap with weight 1 (and its
    skip with it: the plain form has 2 on the diagonal). The gradient reaching channel i of block 2
    from final channel j is then G_j (j != i) or 2 G_j (j = i): along the SAP 2|G_i| against the sum
    of 63 others. With |G_j| equal for all j (the classifier's weights all 1 in one row), 2 < 63."""
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


def test_a_per_block_figure_of_two_snapshots_draws_a_line_for_each(monkeypatch):
    import pandas as pd

    drawn = {}
    monkeypatch.setattr(figures, "to_png", lambda fig: drawn.setdefault("fig", fig) and b"png")
    rows = pd.DataFrame([{"figure": "f", "label": "ResNet-20", "run": "r", "epoch": e, "block": b, "quantity": "q", "value": 0.1 * b}
                         for e in (0, 20) for b in (1, 2, 3)])
    figures.per_block(rows, "f")
    assert {line.get_label() for line in drawn["fig"].axes[0].get_lines()} == {"ResNet-20, epoch 0 (1 run)", "ResNet-20, epoch 20 (1 run)"}


def test_a_net_without_signal_activation_paths_is_refused_by_name():
    with pytest.raises(ValueError, match="measures paper 002's nets .*, not Linear"):
        dominant_flow.measure_dominant_flow(torch.nn.Linear(2, 2), {}, {"examples": 1}, torch.device("cpu"))
