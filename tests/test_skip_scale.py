"""Paper 001's learned effective scale of the skip (measure/skip_scale.py), on combiners whose
answer is known by hand."""

import pandas as pd
import pytest
import torch

from resrepro import models, residual
from resrepro.measure.skip_scale import effective_scale, measure_skip_scale, summarize_skip_scale

from test_blocks import data


def alternating(value: float, n: int = 2, c: int = 2) -> torch.Tensor:
    """(n, c, 2, 2) images of +value and -value in turn: mean 0, standard deviation |value|."""
    signs = torch.tensor([1.0, -1.0]).repeat(c * 2)[: c * 4].reshape(c, 2, 2)
    return (value * signs).expand(n, -1, -1, -1).clone()


def test_xskip_ln_scales_the_skip_by_lam_w_over_sigma():
    block = residual.build("xskip_ln", 2, "conv", {"lam": 2})
    with torch.no_grad():
        block.norm.weight.copy_(torch.tensor([1.0, 3.0]))
    x, f = torch.zeros(2, 2, 2, 2), alternating(4.0)  # 2x + F has sigma 4
    assert effective_scale(block, x, f).mean().item() == pytest.approx(2 * 2.0 / 4.0, rel=1e-4)  # 2 * mean(w) / sigma


def test_rskip_ln_scale_is_the_coefficient_of_x_in_eq_5():
    """x = 0, F = +-2: sigma_1 = 2, y_1 = +-1, so x + y_1 has sigma_2 = 1; with w = 1,
    s = (w_2 / sigma_2) (1 + w_1 / sigma_1) = 1.5."""
    block = residual.build("rskip_ln", 2, "conv", {"lam": 2})
    assert effective_scale(block, torch.zeros(2, 2, 2, 2), alternating(2.0)).mean().item() == pytest.approx(1.5, rel=1e-4)
    with torch.no_grad():
        block.norms[0].weight.fill_(2.0)  # y_1 = +-2: sigma_2 = 2, s = (1/2)(1 + 2/2) = 1
    assert effective_scale(block, torch.zeros(2, 2, 2, 2), alternating(2.0)).mean().item() == pytest.approx(1.0, rel=1e-4)


def test_bn_in_eval_mode_uses_its_running_sigma():
    block = residual.build("xskip_bn", 2, "conv", {"lam": 2}).eval()
    with torch.no_grad():
        block.norm.running_var.copy_(torch.tensor([4.0, 16.0]))
        block.norm.weight.copy_(torch.tensor([2.0, 2.0]))
    s = effective_scale(block, torch.randn(3, 2, 2, 2), torch.randn(3, 2, 2, 2))
    assert s.flatten().tolist() == pytest.approx([2 * 2 / 2, 2 * 2 / 4], rel=1e-4)  # per channel
    with pytest.raises(ValueError, match="BatchNorm2d"):
        effective_scale(block.train(), torch.randn(3, 2, 2, 2), torch.randn(3, 2, 2, 2))


def test_a_skip_without_a_norm_has_its_constant_scale_and_other_variants_are_refused():
    x = torch.zeros(1, 2, 2, 2)
    assert effective_scale(residual.build("add", 2, "conv", {}), x, x).item() == 1.0
    assert effective_scale(residual.build("xskip", 2, "conv", {"lam": 3}), x, x).item() == 3.0
    with pytest.raises(ValueError, match="no effective scale defined for variant 'sas'"):
        effective_scale(residual.build("sas", 2, "conv", {}), x, x)


def test_a_resnet_is_measured_on_its_middle_blocks():
    net = models.build({"arch": "preact_resnet", "depth": 14, "variant": "rskip_ln", "args": {"lam": 2}, "classes": 2, "in_channels": 1})
    frame = measure_skip_scale(net, data(), {"examples": 10000, "splits": ["test"], "batch_size": 7, "blocks": "middle"}, torch.device("cpu"))
    assert frame["block"].tolist() == [3, 4] and frame["examples"].eq(20).all()
    assert frame["value"].between(0.1, 10).all()
    with pytest.raises(ValueError, match="blocks='top' is invalid"):
        measure_skip_scale(net, data(), {"examples": 5, "splits": ["test"], "batch_size": 7, "blocks": "top"}, torch.device("cpu"))


def test_the_summary_gives_the_mean_over_the_blocks_shown():
    frame = pd.DataFrame({"split": "train", "block": [3, 4, 5], "quantity": "effective scale of the skip", "value": [2.0, 3.0, 4.0]})
    assert summarize_skip_scale(frame) == "train: blocks 3-5, mean effective scale 3.00 (from 2.00 to 4.00)"


class NormedBlock(torch.nn.Module):
    """h -> LN(2h + c h) (2xSkip+LN with F = c h), on one channel."""

    def __init__(self, c: float):
        super().__init__()
        self.c = c
        self.residual = residual.build("xskip_ln", 1, "conv", {"lam": 2})

    def forward(self, h):
        return self.residual(h, self.c * h)


def test_the_measured_scale_is_the_mean_over_examples_of_2_over_sigma():
    """sigma of 2h + c h is |2 + c| std(h) per example: s = 2 / (|2 + c| std(h)), averaged over
    every example of every batch (20 examples in batches of 7)."""
    from test_unroll import Net

    d = data()
    net = Net(NormedBlock(1.0))
    frame = measure_skip_scale(net, d, {"examples": 10000, "splits": ["test"], "batch_size": 7, "blocks": "all"}, torch.device("cpu"))
    h = (d["test_x"].float() / 255 - 0.5) / 0.25
    sigma = (3.0 * h).flatten(1).var(dim=1, unbiased=False).add(1e-5).sqrt()
    assert list(frame.columns) == ["split", "block", "quantity", "value", "examples"]
    assert frame["block"].tolist() == [1] and frame["examples"].tolist() == [20]
    assert frame["quantity"].tolist() == ["effective scale of the skip"]
    assert frame["value"].iloc[0] == pytest.approx((2.0 / sigma).mean().item(), rel=1e-5)


def test_rskip_scale_uses_x_plus_f_and_x_plus_y():
    """x = 1 + noise-free pattern, F = x: sigma_1 is std(2x), sigma_2 std(x + y_1): by hand."""
    block = residual.build("rskip_ln", 1, "conv", {"lam": 2})
    x = alternating(1.0, n=1, c=1) + 3.0  # values 4 and 2: mean 3, std 1
    f = x.clone()
    z1 = x + f  # std 2
    y1 = (z1 - z1.mean()) / (z1.var(unbiased=False) + 1e-5).sqrt()  # +-1
    z2 = x + y1  # values 5 and 1: std 2
    expected = (1 / (z2.var(unbiased=False) + 1e-5).sqrt()) * (1 + 1 / (z1.var(unbiased=False) + 1e-5).sqrt())
    assert effective_scale(block, x, f).mean().item() == pytest.approx(expected.item(), rel=1e-5)
    assert expected.item() == pytest.approx(0.5 * 1.5, rel=1e-4)
