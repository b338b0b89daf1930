"""Paper 002's noise stability measurements (measure/cushion.py): the layer cushion of Arora et al.
2018 and the final activations' distribution, on nets whose answer is known by hand."""

import copy
import math

import pandas as pd
import pytest
import torch
from torch.nn import functional as F

from resrepro import models
from resrepro.measure import cushion, get
from resrepro.models.simple_net import id_entries

SETTINGS = {"examples": 50000, "splits": ["train"], "split": "train", "batch_size": 4, "bins": 20, "range": 5.0}


def net_with_block_weights(variant: str, scale: float) -> torch.nn.Module:
    """A depth-5 simplified net (one block a group, 8x8 input) whose blocks' weights are `scale`
    times their ID entries and whose biases are 0; the stem and classifier as initialised."""
    net = models.build({"arch": "simple_net", "depth": 5, "variant": variant, "classes": 10, "in_channels": 3})
    with torch.no_grad():
        for block in net.blocks:
            block.conv.weight.copy_(scale * id_entries(block.conv.weight))
            block.conv.bias.zero_()
    return net


def data(n: int = 6) -> dict:
    g = torch.Generator().manual_seed(0)
    return {"train_x": torch.randint(0, 255, (n, 3, 8, 8), generator=g, dtype=torch.uint8), "train_y": torch.arange(n) % 10,
            "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}


def test_tap_counts_of_a_padded_3x3_conv_by_hand():
    # 3x3 input, stride 1: a corner tap reads inside at 2 x 2 output positions, the centre at 3 x 3
    assert cushion.tap_counts((3, 3), stride=1).tolist() == [[4, 6, 4], [6, 9, 6], [4, 6, 4]]
    # 4x4 input, stride 2 (outputs at rows 0 and 2): the top tap reads row -1 (padding) at output 0
    assert cushion.tap_counts((4, 4), stride=2).tolist() == [[1, 2, 2], [2, 4, 4], [2, 4, 4]]


def test_the_operator_norm_of_an_all_ones_kernel_on_3x3_is_7():
    """sum over taps of 1 x their counts: 9 + 4 x 6 + 4 x 4 = 49."""
    assert cushion.operator_frobenius(torch.ones(1, 1, 3, 3), (3, 3), stride=1) == pytest.approx(7.0)


@pytest.mark.parametrize("size,stride", [((5, 4), 1), ((4, 4), 2), ((5, 5), 2)])
def test_the_operator_norm_is_the_frobenius_norm_of_the_convolutions_matrix(size, stride):
    weight = torch.randn(3, 2, 3, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    matrix = torch.autograd.functional.jacobian(lambda x: F.conv2d(x, weight, None, stride, 1), torch.zeros(1, 2, *size, dtype=torch.float64))
    assert cushion.operator_frobenius(weight, size, stride) == pytest.approx(matrix.norm().item())


def test_a_plain_identity_layer_has_cushion_one_over_the_root_of_its_size():
    """Block 1 maps 16 channels of 8 x 8 to themselves: ||A a|| = ||a||, ||A||_F = sqrt(16 * 64) = 32.
    Block 2 (16 -> 32, stride 2) repeats the strided input twice: on a constant input
    ||A a||^2 = 2 * 16 * 16, ||A||_F^2 = 32 outputs x 16 positions, ||a||^2 = 16 * 64: 1/32 again."""
    net = net_with_block_weights("plain", 1.0)
    x = torch.randn(5, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got = cushion.cushions(net, x)
    assert got.shape == (5, 3)
    assert got[:, 0].tolist() == pytest.approx([1 / 32] * 5)
    block2 = net.blocks[1]
    a = torch.ones(1, 16, 8, 8)
    out = F.conv2d(a, block2.conv.weight.detach(), None, 2, 1)
    assert (out.norm() / (cushion.operator_frobenius(block2.conv.weight, (8, 8), 2) * a.norm())).item() == pytest.approx(1 / 32)


def test_a_residual_layer_is_measured_by_its_change_not_by_its_identity():
    """Residual block 1 with weights 0.1 I computes 1.1 a; its norm is that of 0.1 I: 0.1 * 32.
    Its cushion, 1.1 / 3.2, is 11 times the plain identity layer's. A zero residual layer
    changes nothing and has an infinite cushion."""
    x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert cushion.cushions(net_with_block_weights("add", 0.1), x)[:, 0].tolist() == pytest.approx([1.1 / 3.2] * 4)
        assert torch.isinf(cushion.cushions(net_with_block_weights("add", 0.0), x)[:, 0]).all()


def test_layer_cushion_writes_quantiles_per_block_and_a_residual_net_at_init_has_the_larger():
    """At initialisation (HMWI: tiny weights) the residual net's cushion dwarfs the plain net's (KWI)."""
    frames = {}
    for variant in ("plain", "add"):
        torch.manual_seed(0)
        net = models.build({"arch": "simple_net", "depth": 8, "variant": variant, "classes": 10, "in_channels": 3})
        frames[variant] = cushion.measure_layer_cushion(net, data(), SETTINGS, torch.device("cpu"))
    plain, residual = frames["plain"], frames["add"]
    assert list(plain.columns) == ["split", "block", "group", "quantity", "value"] and sorted(set(plain["block"])) == [1, 2, 3, 4, 5, 6]
    assert len(plain) == 6 * 3 and plain["value"].notna().all()
    assert set(plain["group"]) == set(cushion.QUANTILES)
    median = {v: f[f["group"] == "median"].set_index("block")["value"] for v, f in frames.items()}
    assert (median["add"] > 5 * median["plain"]).all()
    low, high = (plain[plain["group"] == g].set_index("block")["value"] for g in ("10th percentile", "90th percentile"))
    assert (low <= median["plain"]).all() and (median["plain"] <= high).all()
    summary = get("layer_cushion").summarize(residual)
    assert summary.startswith("median cushion") and "mean over the 6 blocks" in summary


def test_the_final_activation_is_the_pooled_output_and_its_gradient_the_classifiers():
    """a^L is "the outputs of the average layer following the ReLU function" (SM D.4.2): the last
    block's output averaged over its positions, one value a channel; dL/da^L = (softmax(z) -
    onehot(y)) W, the classifier's weights W."""
    torch.manual_seed(0)
    net = models.build({"arch": "simple_net", "depth": 5, "variant": "add", "classes": 10, "in_channels": 3})
    x, y = torch.randn(3, 3, 8, 8), torch.tensor([1, 4, 7])
    final, gradient = cushion.final_activations(net, x, y)
    assert final.shape == (3, 64) and torch.allclose(final, net.blocks(F.relu(net.stem(x))).mean(dim=(2, 3)), atol=1e-6)
    logits = net(x)
    expected = (logits.softmax(1) - F.one_hot(y, 10)) @ net.fc.weight
    assert torch.allclose(gradient, expected.detach(), atol=1e-6)


def test_final_activations_histograms_count_every_value_and_state_its_moments():
    torch.manual_seed(0)
    net = models.build({"arch": "simple_net", "depth": 5, "variant": "add", "classes": 10, "in_channels": 3})
    frame = cushion.measure_final_activations(net, data(6), SETTINGS, torch.device("cpu"))
    hist, stats = frame[frame["bin"].notna()], frame[frame["quantity"].notna()]
    for part in (cushion.FINAL, cushion.GRADIENT):
        assert hist.loc[hist["part"] == part, "value"].sum() == 6 * 64  # every value (a channel an example), edge bins included
        moments = stats[stats["part"] == part].set_index("quantity")["value"]
        assert moments["mean / std"] == pytest.approx(moments["mean"] / moments["std"])
    for part in (cushion.FINAL, cushion.GRADIENT):  # 20 bins of 0.5 std over [-5, 5], centred
        assert hist.loc[hist["part"] == part, "bin"].round(6).tolist() == [-4.75 + 0.5 * i for i in range(20)]
    # the counts are those of each value over its part's std, the values beyond 5 std in the edge bins
    x, y = next(cushion.batches(data(6), "train", {**SETTINGS, "batch_size": 6}, torch.device("cpu")))
    final, gradient = cushion.final_activations(net, x, y)
    for part, values in ((cushion.FINAL, final.flatten().double()), (cushion.GRADIENT, gradient.flatten().double())):
        expected = torch.histc((values / values.std()).clamp(-5, 5), bins=20, min=-5, max=5)
        assert hist.loc[hist["part"] == part, "value"].tolist() == expected.tolist()
    # the final activation is the mean of a ReLU's outputs: never below 0, so nothing in the negative bins
    assert hist[(hist["part"] == cushion.FINAL) & (hist["bin"] < -0.5)]["value"].sum() == 0
    summary = cushion.summarize_final_activations(frame)
    assert "final activation / its std: mean / std" in summary and "excess kurtosis" in summary


@pytest.mark.parametrize("values,expected", [
    # symmetric: mean 0, std sqrt(4/3), standardised values +-0.866: skewness 0, 0.5625 - 3
    ([-1.0, -1.0, 1.0, 1.0], {"mean": 0.0, "std": math.sqrt(4 / 3), "mean / std": 0.0, "skewness": 0.0, "excess kurtosis": -2.4375}),
    # one large value: mean 0.75, std 1.5, standardised -0.5 (x3) and 1.5: cubes 3 / 4, fourth powers 5.25 / 4
    ([0.0, 0.0, 0.0, 3.0], {"mean": 0.75, "std": 1.5, "mean / std": 0.5, "skewness": 0.75, "excess kurtosis": 1.3125 - 3}),
])
def test_moments_by_hand(values, expected):
    assert cushion.moments(torch.tensor(values, dtype=torch.float64)) == pytest.approx(expected)
    flat = cushion.moments(torch.ones(3, dtype=torch.float64))  # no spread: no shape
    assert (flat["mean"], flat["std"]) == (1.0, 0.0) and all(math.isnan(flat[k]) for k in ("mean / std", "skewness", "excess kurtosis"))


class Stack(torch.nn.Module):
    """Blocks alone, as a net of blocks: the measurement reads `blocks` and calls the net."""

    def __init__(self, *blocks):
        super().__init__()
        self.blocks = torch.nn.Sequential(*blocks)

    def forward(self, x):
        return self.blocks(x)


def fully_fledged(variant: str, depth: int = 8) -> torch.nn.Module:
    torch.manual_seed(0)
    return models.build({"arch": "resnet_cifar", "depth": depth, "variant": variant, "classes": 10, "in_channels": 3}).eval()


def test_an_identity_block_has_interlayer_cushion_one():
    """A residual block whose branch ends in a BN of weight and bias 0 computes ReLU(x): on a
    positive input its Jacobian is the identity, so sqrt(h) ||x|| / (||I||_F ||x||) = 1 exactly
    (Rademacher probes measure ||I||_F without error)."""
    net = fully_fledged("add")
    with torch.no_grad():
        for block in net.blocks:
            block.bn2.weight.zero_()
            block.bn2.bias.zero_()
    x = torch.rand(3, 16, 8, 8) + 0.1
    got = cushion.interlayer_cushions(Stack(net.blocks[0]), x, probes=2, generator=torch.Generator().manual_seed(0))
    assert got.shape == (3, 1) and got.flatten().tolist() == pytest.approx([1.0] * 3)


def test_the_jacobian_norm_estimate_converges_to_the_exact_one():
    """A plain block on 16 x 4 x 4 inputs: its exact Jacobian (256 x 256) against the estimate."""
    block = fully_fledged("plain").blocks[0]
    x = torch.randn(1, 16, 4, 4, generator=torch.Generator().manual_seed(1))
    jacobian = torch.autograd.functional.jacobian(block, x, vectorize=True).reshape(256, 256)
    exact = jacobian.norm().item()
    estimate = cushion.jacobian_frobenius(block, x, probes=100, generator=torch.Generator().manual_seed(2)).item()
    assert estimate == pytest.approx(exact, rel=0.05)
    x_part = (jacobian @ x.flatten()).norm().item()
    got = cushion.interlayer_cushions(Stack(block), x, probes=100, generator=torch.Generator().manual_seed(2)).item()
    assert got == pytest.approx(16 * x_part / (exact * x.norm().item()), rel=0.05)  # sqrt(256) = 16


def test_interlayer_cushion_rows_per_block_and_quantile():
    data_ = data(8)
    frames = {v: cushion.measure_interlayer_cushion(fully_fledged(v), data_, {**SETTINGS, "probes": 4}, torch.device("cpu")) for v in ("plain", "add")}
    plain, residual = (f[f["group"] == "median"].set_index("block")["value"] for f in (frames["plain"], frames["add"]))
    assert list(plain.index) == [1, 2, 3] and plain.notna().all() and residual.notna().all()
    assert ((plain > 0) & (residual > 0)).all()
    low, high = (frames["add"][frames["add"]["group"] == g].set_index("block")["value"] for g in ("10th percentile", "90th percentile"))
    assert (low <= residual).all() and (residual <= high).all()
    assert set(frames["add"]["quantity"]) == {cushion.INTERLAYER} and list(frames["add"].columns) == ["split", "block", "group", "quantity", "value"]
    again = cushion.measure_interlayer_cushion(fully_fledged("add"), data_, {**SETTINGS, "probes": 4}, torch.device("cpu"))
    pd.testing.assert_frame_equal(again, frames["add"])  # its probes come from a fixed seed: a rerun measures the same


def test_a_blocks_cushion_is_its_convolution_matrixs_by_hand():
    """Random weights, every tap in use: ||A a|| / (||A||_F ||a||) with A the explicit matrix of
    block 1's convolution (16 x 8 x 8 -> 16 x 8 x 8, padding 1), a the block's input; the residual
    block's numerator uses A + I (its plain form), its denominator A alone."""
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(5))
    for variant in ("plain", "add"):
        torch.manual_seed(3)
        net = models.build({"arch": "simple_net", "depth": 5, "variant": variant, "classes": 10, "in_channels": 3})
        with torch.no_grad():
            a = F.relu(net.stem(x))
            weight = net.blocks[0].conv.weight
            matrix = torch.autograd.functional.jacobian(lambda v: F.conv2d(v, weight, None, 1, 1), a[:1], vectorize=True).reshape(1024, 1024)
            mapped = matrix + torch.eye(1024) if variant == "add" else matrix
            expected = [((mapped @ a[n].flatten()).norm() / (matrix.norm() * a[n].norm())).item() for n in range(2)]
            assert cushion.cushions(net, x)[:, 0].tolist() == pytest.approx(expected, rel=1e-5)


def test_a_diagonal_nets_cushion_reads_the_weights_its_forward_pass_uses():
    """simple_net_diagonal masks its kernels in the forward pass: weights off the diagonal (here put
    there after init) are not the layer's and must not count in ||A||_F."""
    torch.manual_seed(0)
    diagonal = models.build({"arch": "simple_net_diagonal", "depth": 5, "variant": "add", "classes": 10, "in_channels": 3})
    with torch.no_grad():
        for block in diagonal.blocks:
            block.conv.weight.normal_(0, 0.1)
    masked = copy.deepcopy(diagonal)
    with torch.no_grad():
        for block in masked.blocks:
            block.conv.weight.mul_(block.mask)
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(cushion.cushions(diagonal, x), cushion.cushions(masked, x))
        masked.blocks[0].mask = None  # the same weights, read without the mask: a different norm
        unmasked = copy.deepcopy(diagonal)
        unmasked.blocks[0].mask = None
        assert not torch.allclose(cushion.cushions(unmasked, x)[:, 0], cushion.cushions(diagonal, x)[:, 0])


def test_the_cushion_summary_by_hand():
    frame = pd.DataFrame([{"block": b, "group": g, "value": v} for b, values in ((1, (0.1, 0.2)), (2, (0.3, 0.4)), (3, (0.5, 0.9)), (4, (0.7, 0.8)))
                          for g, v in zip(("median", "90th percentile"), values)])
    assert cushion.summarize_layer_cushion(frame) == "median cushion 0.1 at block 1, 0.5 at block 3, 0.7 at block 4; mean over the 4 blocks 0.4"
    assert cushion.summarize_layer_cushion(frame[frame["group"] != "median"]) == "no cushion measured"
