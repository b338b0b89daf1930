"""Paper 003's per-block measurements (measure/blocks.py) on nets whose answers are known by hand,
and its three architectures (models/iter_resnets.py)."""

import math

import pandas as pd
import pytest
import torch
from torch import nn

from resrepro import models, residual
from resrepro.measure import blocks, borderline
from resrepro.models.iter_resnets import SIZES, keras_count

SETTINGS = {"examples": 10000, "splits": ["test"], "batch_size": 7}
CPU = torch.device("cpu")


class Toy(nn.Module):
    """h_0 = x (one channel); block i: h_{i+1} = h_i + F_i(h_i) with F_i(h) = c_i * h + b_i (b_i a
    constant); two-class logits (s, -s) from s = the mean of the last h."""

    def __init__(self, scales, offsets=None):
        super().__init__()
        self.scales, self.offsets = scales, offsets or [0.0] * len(scales)
        self.combiners = nn.ModuleList(residual.build("add", 1, "conv", {}) for _ in scales)
        self.unused = nn.Parameter(torch.zeros(()))  # a parameter, so that activations may require grad

    def forward(self, x):
        h = x + 0 * self.unused
        for c, b, combine in zip(self.scales, self.offsets, self.combiners):
            h = combine(h, c * h + b)
        s = h.mean(dim=(1, 2, 3))
        return torch.stack([s, -s], dim=1)


def data(n: int = 20, labels=None) -> dict:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, 1, 8, 8), generator=g, dtype=torch.uint8)
    y = labels(x) if labels else torch.zeros(n, dtype=torch.long)
    return {"train_x": x.flip(0), "train_y": y.flip(0), "test_x": x, "test_y": y, "mean": [0.5], "std": [0.25]}


def values(frame: pd.DataFrame, split: str = "test") -> dict[int, float]:
    return frame[frame["split"] == split].set_index("block")["value"].to_dict()


def test_blocks_are_the_residual_combiners_in_forward_order():
    net = models.build({"arch": "preact_resnet", "depth": 14, "variant": "add", "args": {}, "classes": 3, "in_channels": 1})
    found = blocks.residual_blocks(net)
    assert len(found) == 6 and found == [b.residual for b in net.blocks]


def test_l2_ratio_is_the_norm_of_f_over_the_norm_of_h():
    frame = blocks.measure_l2_ratio(Toy([2.0, -0.5, 0.0]), data(), SETTINGS, CPU)
    assert list(frame.columns) == ["split", "block", "quantity", "value", "examples"]
    assert frame["examples"].eq(20).all()  # 20 examples < the 10,000 asked: all of them
    assert values(frame) == pytest.approx({1: 2.0, 2: 0.5, 3: 0.0})


def test_l2_ratio_averages_per_example_ratios_over_exactly_the_examples_asked():
    """F = h + 1: the ratio ||h + 1|| / ||h|| differs per example, so its mean is checkable."""
    d = data(10)
    frame = blocks.measure_l2_ratio(Toy([1.0], [1.0]), d, {**SETTINGS, "examples": 4, "batch_size": 3}, CPU)
    h = (d["test_x"][:4].float() / 255 - 0.5) / 0.25
    expected = ((h + 1).flatten(1).norm(dim=1) / h.flatten(1).norm(dim=1)).mean().item()
    assert values(frame)[1] == pytest.approx(expected, rel=1e-5)
    assert frame["examples"].eq(4).all()


def test_each_split_is_measured_on_its_own_images():
    """Block 1's F = h + 1 gives a per-example ratio, so the train and test values differ unless the
    splits' first images are the same: here train holds the test images in reverse order."""
    d = data(10)
    frame = blocks.measure_l2_ratio(Toy([1.0], [1.0]), d, {**SETTINGS, "examples": 3, "splits": ["train", "test"]}, CPU)
    assert set(frame["split"]) == {"train", "test"}
    assert values(frame, "train")[1] != pytest.approx(values(frame, "test")[1])
    reversed_d = {**d, "train_x": d["test_x"], "train_y": d["test_y"]}
    same = blocks.measure_l2_ratio(Toy([1.0], [1.0]), reversed_d, {**SETTINGS, "examples": 3, "splits": ["train", "test"]}, CPU)
    assert values(same, "train")[1] == pytest.approx(values(same, "test")[1])


def sign_labels(x: torch.Tensor) -> torch.Tensor:
    """The class a net with one sign flip gets right: 1 where the normalized image's mean is > 0."""
    return (((x.float() / 255 - 0.5) / 0.25).mean(dim=(1, 2, 3)) > 0).long()


def test_dropping_an_identity_block_changes_nothing_and_dropping_a_sign_flip_inverts_every_prediction():
    # block 1: F = -2h, so h_2 = -h_1 (the net classifies by the sign of -mean(x)); block 2: F = 0
    frame = blocks.measure_block_drop(Toy([-2.0, 0.0]), data(40, sign_labels), SETTINGS, CPU)
    acc = values(frame)
    assert acc[0] == 100.0  # the whole net: every label is the net's own answer
    assert acc[1] == 0.0  # without the flip, every prediction is the other class
    assert acc[2] == 100.0  # an identity block (F = 0) changes nothing
    assert sorted(acc) == [0, 1, 2]


def test_a_dropped_block_is_restored_afterwards():
    net, d = Toy([-2.0, 0.0]), data(12, sign_labels)
    blocks.measure_block_drop(net, d, SETTINGS, CPU)
    x = (d["test_x"].float() / 255 - 0.5) / 0.25
    assert (net(x).argmax(1) == d["test_y"]).all()


def test_cosine_is_minus_one_when_f_points_along_minus_the_gradient():
    """F_1 = +1 everywhere (c = 0, b = 1). With every label 0, L = log(1 + exp(-2s)) falls as s grows,
    so dL/dh is negative and the same at every pixel: F is exactly along -dL/dh."""
    frame = blocks.measure_grad_cosine(Toy([0.0], [1.0]), data(), SETTINGS, CPU)
    assert values(frame)[1] == pytest.approx(-1.0, abs=1e-6)


def test_cosine_is_plus_one_when_the_labels_turn_the_gradient_round():
    d = data()
    d["test_y"] = torch.ones_like(d["test_y"])  # L now grows with s: dL/dh > 0, along F
    frame = blocks.measure_grad_cosine(Toy([0.0], [1.0]), d, SETTINGS, CPU)
    assert values(frame)[1] == pytest.approx(1.0, abs=1e-6)


def test_cosine_takes_the_gradient_through_the_blocks_above():
    """A block above that maps h to -h (F_2 = -2h) turns dL/dh at block 1 round: cos +1, not -1."""
    frame = blocks.measure_grad_cosine(Toy([0.0, -2.0], [1.0, 0.0]), data(), SETTINGS, CPU)
    assert values(frame)[1] == pytest.approx(1.0, abs=1e-6)


def test_a_confident_examples_cosine_keeps_its_gradient():
    """Block 1 scales h by 201 (F = 200h) and the labels are the classes the net gives: margins 2s
    of about 60, where a float32 loss's gradient is exactly 0 (and the cosine with it). The
    gradient's direction is still defined: dL/dh_1 pushes s further, so cos = -|sum h| /
    (||h|| sqrt(N)) per example, which the float64 loss keeps."""
    sample = data(20, lambda x: (((x.float() / 255 - 0.5) / 0.25).mean(dim=(1, 2, 3)) < 0).long())
    h = ((sample["test_x"].double() / 255 - 0.5) / 0.25).flatten(1)
    expected = (-h.sum(1).abs() / (h.norm(dim=1) * h.shape[1] ** 0.5)).mean().item()
    frame = blocks.measure_grad_cosine(Toy([200.0]), sample, SETTINGS, CPU)
    assert abs(expected) > 0.01 and values(frame)[1] == pytest.approx(expected, rel=1e-6)


def test_cosine_leaves_no_gradient_on_the_weights():
    net = models.build({"arch": "preact_resnet", "depth": 8, "variant": "add", "args": {}, "classes": 3, "in_channels": 1})
    blocks.measure_grad_cosine(net, {**data(), "test_y": torch.zeros(20, dtype=torch.long)}, SETTINGS, CPU)
    assert all(p.grad is None for p in net.parameters())


MEASURES = {"l2_ratio": blocks.measure_l2_ratio, "block_drop": blocks.measure_block_drop,
            "grad_cosine": blocks.measure_grad_cosine, "grad_norm": blocks.measure_grad_norm,
            "borderline": lambda *a: borderline.measure_borderline(*a), "skip_weight": blocks.measure_skip_weight}


@pytest.mark.parametrize("name", MEASURES)
def test_a_net_without_residual_blocks_is_refused_naming_the_measurement(name):
    class NoBlocks(nn.Module):
        def forward(self, x):
            return x.mean(dim=(2, 3)).repeat(1, 2)

    with pytest.raises(ValueError, match=f"^{name}: the model has no residual block"):
        MEASURES[name](NoBlocks(), data(), {**SETTINGS, "blocks": "all", "last_blocks": 5, "margin": 0.1}, CPU)


@pytest.mark.parametrize("name, quantity", [
    ("l2_ratio", "||F(h)|| / ||h||"), ("block_drop", "accuracy (%), block dropped (0: none)"),
    ("grad_cosine", "cos(F(h), dL/dh)"), ("grad_norm", "||dL/dy||")])
def test_each_measurement_names_its_quantity(name, quantity):
    """The quantity titles the report's panel and its axis."""
    frame = MEASURES[name](Toy([0.5], [1.0]), data(), {**SETTINGS, "blocks": "all"}, CPU)
    assert frame["quantity"].eq(quantity).all()


def frame_of(split_values: dict[str, list[float]], first_block: int = 1) -> pd.DataFrame:
    return pd.DataFrame([{"split": split, "block": first_block + i, "value": v}
                         for split, vs in split_values.items() for i, v in enumerate(vs)])


def test_summaries_read_the_papers_claims():
    assert blocks.summarize_l2_ratio(frame_of({"test": [2.0, 0.5, 0.3, 0.1]})) == (
        "test: block 1 2.00, upper half median 0.20, Spearman rho with depth -1.00")
    assert blocks.summarize_block_drop(frame_of({"train": [95.0, 20.0, 94.5, 90.0]}, first_block=0)) == (
        "train: whole net 95.0%; dropping block 1 20.0%, the worst block 1 20.0%; 1 of 3 blocks cost under 1 point")
    assert blocks.summarize_grad_cosine(frame_of({"test": [0.1, -0.02, -0.05, -0.3, -0.2, -0.4]})) == (
        "test: negative in 5 of 6 blocks; mean +0.040 in the lowest third, -0.300 in the highest")


def test_summaries_count_a_block_at_the_boundary_as_the_paper_reads_it():
    """A block that costs exactly 1 point is not "under 1 point"; a cosine of exactly 0 is not negative."""
    assert blocks.summarize_block_drop(frame_of({"test": [90.0, 89.0, 89.5]}, first_block=0)).endswith(
        "1 of 2 blocks cost under 1 point")
    assert blocks.summarize_grad_cosine(frame_of({"test": [0.0, -0.1, -0.2]})).startswith("test: negative in 2 of 3 blocks")


def test_summaries_join_two_splits():
    l2 = blocks.summarize_l2_ratio(frame_of({"train": [2.0, 1.0], "test": [1.0, 0.5]}))
    assert l2 == ("train: block 1 2.00, upper half median 1.00, Spearman rho with depth -1.00; "
                  "test: block 1 1.00, upper half median 0.50, Spearman rho with depth -1.00")
    drop = blocks.summarize_block_drop(frame_of({"train": [99.0, 50.0], "test": [95.0, 60.0]}, first_block=0))
    assert drop == ("train: whole net 99.0%; dropping block 1 50.0%, the worst block 1 50.0%; 0 of 1 blocks cost under 1 point; "
                    "test: whole net 95.0%; dropping block 1 60.0%, the worst block 1 60.0%; 0 of 1 blocks cost under 1 point")


def test_splits_are_ordered_training_then_held_out_then_the_rest():
    assert blocks.splits_of(frame_of({"val": [1.0], "test": [1.0], "train": [1.0]})) == ["train", "test", "val"]


def test_summaries_keep_the_splits_apart_training_first():
    text = blocks.summarize_grad_cosine(frame_of({"test": [0.1, 0.2, 0.3], "train": [-0.1, -0.1, -0.1]}))
    assert text == ("train: negative in 3 of 3 blocks; mean -0.100 in the lowest third, -0.100 in the highest; "
                    "test: negative in 0 of 3 blocks; mean +0.100 in the lowest third, +0.300 in the highest")


# --- the architectures -------------------------------------------------------------------------


def iter_net(arch: str, size: str, classes: int = 10, in_channels: int = 3, device: str = "cpu", image_size: int | None = None) -> nn.Module:
    """The net of that size for its usual input: CIFAR's 32x32 at paper size, digits' 8x8 at mini."""
    with torch.device(device):
        return models.build({"arch": arch, "size": size, "variant": "add", "args": {}, "classes": classes, "in_channels": in_channels,
                             "image_size": image_size or (32 if size == "paper" else 8)})


def test_the_avg_pooling_net_has_the_papers_parameter_count():
    """Sec. 4: "It has 12,201,310 parameters" (Keras' count: BN's running statistics included)."""
    assert keras_count(iter_net("avgpool_resnet", "paper", device="meta")) == 12_201_310


def test_the_single_representation_net_has_the_papers_parameter_count_and_classifier():
    """Sec. 4: "BatchNorm→ReLU→AveragePool(8,8)→Flatten→Fully-Connected-Layer(#Classes)→Softmax.
    This model has 1,829,210 parameters": on 32x32 maps the pool leaves 4x4 of them, 1,600
    features; on 8x8 digits it averages the whole map."""
    net = iter_net("single_rep_resnet", "paper", device="meta")
    assert keras_count(net) == 1_829_210 and net.fc.in_features == 1_600
    digits = iter_net("single_rep_resnet", "mini", image_size=8)
    assert digits.fc.in_features == 32 and digits(torch.randn(2, 3, 8, 8)).shape == (2, 10)


def test_a_staged_net_without_its_image_size_is_refused_and_the_wide_net_keeps_its_documented_count():
    """The classifier's pool reads the input's size (1,600 features on CIFAR, 100 without): a spec
    without it would silently count 15,000 weights short. The wide net: 39,022,410, not the paper's
    45,732,842 (docs/parameters.md: no reading of the text with four blocks a stage gives it)."""
    with pytest.raises(residual.ConfigError, match="needs the input's image_size"):
        models.build({"arch": "single_rep_resnet", "size": "paper", "variant": "add", "args": {}, "classes": 10, "in_channels": 3})
    assert keras_count(iter_net("wide_resnet", "paper", device="meta")) == 39_022_410


@pytest.mark.config
def test_paper_003s_resnet_110_has_the_papers_parameter_count_under_its_recipe():
    """Sec. 4: "The model has a total of 1,742,762 parameters" (Keras' count), with the paper's
    "He-normal weight initialization ... and biases are initialized to 0": every conv has a bias,
    weights by fan-in, biases 0. He et al. 2016b's own net has neither."""
    import yaml

    from resrepro import recipes
    from resrepro.models.preact_resnet import PreActResNet

    config = yaml.safe_load(open("config/paper.yaml"))["classification"]
    _, recipe = recipes.resolve(config, {"paper": "iter", "table": "iter-f2", "kind": "figure", "arch": "preact_resnet",
                                         "variant": "add", "dataset": "cifar10", "depth": 110})
    spec = models.model_spec({"model": "preact_resnet", "depth": 110, "variant": "add", "args": {}, **recipe},
                             classes=10, in_channels=3, image_size=32)
    with torch.device("meta"):
        assert keras_count(models.build(spec)) == 1_742_762
    torch.manual_seed(0)
    net = models.build(spec)
    conv = net.blocks[40].conv1  # 64 -> 64
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2 / (9 * 64)), rel=0.03) and conv.bias.abs().sum() == 0
    assert PreActResNet(110, 10).blocks[40].conv1.bias is None


@pytest.mark.parametrize("arch, blocks_expected, widths", [
    ("single_rep_resnet", 10, {100}), ("avgpool_resnet", 30, {150}), ("wide_resnet", 12, {160, 320, 640})])
def test_every_block_has_an_identity_skip_at_the_papers_widths(arch, blocks_expected, widths):
    net = iter_net(arch, "paper")
    seen = []
    with blocks.recording(blocks.residual_blocks(net)) as recorded:
        net(torch.zeros(2, 3, 32, 32))
        seen = [(h.shape, f.shape) for h, f in recorded]
    assert len(seen) == blocks_expected
    assert all(h == f for h, f in seen)  # skip and branch alike: no projection inside a block
    assert {h[1] for h, _ in seen} == widths


def test_the_avg_pooling_net_halves_the_resolution_after_each_stage():
    net = iter_net("avgpool_resnet", "mini", in_channels=1)
    with blocks.recording(blocks.residual_blocks(net)) as recorded:
        net(torch.zeros(2, 1, 8, 8))
        sides = [h.shape[-1] for h, _ in recorded]
    assert sides == [8] * 10 + [4] * 10 + [2] * 10


def test_mini_sizes_keep_the_papers_block_counts_and_classify_digits():
    for arch, sizes in SIZES.items():
        assert sizes["mini"][1] == sizes["paper"][1] and len(sizes["mini"][0]) == len(sizes["paper"][0])
        out = iter_net(arch, "mini", classes=10, in_channels=1)(torch.randn(3, 1, 8, 8))
        assert out.shape == (3, 10) and torch.isfinite(out).all()


def test_he_normal_weights_and_zero_biases():
    net = iter_net("single_rep_resnet", "mini", in_channels=1)
    conv = net.body[3].conv1
    assert torch.count_nonzero(conv.bias) == 0
    fan_in = conv.weight[0].numel()
    assert conv.weight.std().item() == pytest.approx((2 / fan_in) ** 0.5, rel=0.05)


def test_an_unknown_size_is_refused_naming_the_sizes():
    with pytest.raises(residual.ConfigError, match="wide_resnet: size 'huge' unknown; allowed: paper, mini"):
        iter_net("wide_resnet", "huge")


# --- gradient norms (paper 000 Fig. 4, paper 001 Fig. 3) ----------------------------------------

GRAD = {"examples": 10000, "splits": ["train"], "batch_size": 7, "blocks": "all"}


def test_grad_norm_at_the_last_block_is_the_losss_slope_spread_over_the_pixels():
    """s = mean(h) over 64 pixels and L = log(1 + exp(-2s)) (label 0): dL/dy = L'(s)/64 at each pixel,
    so ||dL/dy|| = |L'(s)| / 8 with L'(s) = -2 / (1 + exp(2s))."""
    d = data(12)
    frame = blocks.measure_grad_norm(Toy([0.0], [1.0]), d, GRAD, CPU)
    s = ((d["train_x"].float() / 255 - 0.5) / 0.25).mean(dim=(1, 2, 3)) + 1.0
    expected = (2 / (1 + torch.exp(2 * s)) / 8).mean().item()
    assert values(frame, "train")[1] == pytest.approx(expected, rel=1e-5)
    assert frame["quantity"].eq("||dL/dy||").all() and frame["examples"].eq(12).all()


def test_grad_norm_grows_through_each_block_that_scales_its_input():
    """y_2 = 2 y_1 (F = h): the gradient at y_1 is twice that at y_2; y_3 = y_2 (F = 0) passes it on."""
    frame = blocks.measure_grad_norm(Toy([0.0, 1.0, 0.0], [1.0, 0.0, 0.0]), data(), GRAD, CPU)
    g = values(frame, "train")
    assert g[1] == pytest.approx(2 * g[2], rel=1e-5) and g[2] == pytest.approx(g[3], rel=1e-5)


def test_middle_stage_picks_the_middle_of_the_distinct_shapes():
    three = [(16, 8, 8)] * 3 + [(32, 4, 4)] * 3 + [(64, 2, 2)] * 3
    assert blocks.middle_stage(three) == [3, 4, 5]
    assert blocks.middle_stage([(8, 4, 4)] * 4) == [0, 1, 2, 3]
    assert blocks.middle_stage([(8, 4, 4)] * 2 + [(16, 2, 2)] * 2) == [0, 1]


def test_grad_norm_of_the_middle_stage_numbers_blocks_as_in_the_whole_net():
    net = models.build({"arch": "preact_resnet", "depth": 14, "variant": "add", "args": {}, "classes": 3, "in_channels": 1})
    d = {**data(), "train_y": torch.zeros(20, dtype=torch.long)}
    middle = blocks.measure_grad_norm(net, d, {**GRAD, "blocks": "middle"}, CPU)
    every = blocks.measure_grad_norm(net, d, GRAD, CPU)
    assert sorted(values(middle, "train")) == [3, 4]  # stage 2 of 3, two blocks a stage
    assert sorted(values(every, "train")) == [1, 2, 3, 4, 5, 6]
    assert values(middle, "train") == pytest.approx({b: values(every, "train")[b] for b in (3, 4)})
    with pytest.raises(ValueError, match="blocks='top' is invalid"):
        blocks.measure_grad_norm(net, d, {**GRAD, "blocks": "top"}, CPU)


def test_grad_norm_summary_reads_the_spread_over_the_blocks():
    assert blocks.summarize_grad_norm(frame_of({"train": [0.4, 0.3, 0.2]}, first_block=19)) == (
        "train: blocks 19-21, mean 0.3, lowest block / highest 2.00, Spearman rho with depth -1.00")


# --- paper 001's learned skip and learning curves -----------------------------------------------


def test_skip_weight_is_the_norm_of_w_and_its_size_per_dimension():
    net = models.build({"arch": "preact_resnet", "depth": 14, "variant": "wskip_ln", "args": {"init": 1.0}, "classes": 3, "in_channels": 1})
    with torch.no_grad():
        net.blocks[2].residual.w.fill_(0.5)  # stage 2: w in R^32
        net.blocks[3].residual.w.copy_(torch.arange(32.0))
    frame = blocks.measure_skip_weight(net, {}, {"blocks": "middle"}, CPU)
    by = frame.set_index(["block", "quantity"])["value"]
    assert sorted(set(frame["block"])) == [3, 4]  # the middle stage only
    assert by[3, "||w||"] == pytest.approx(0.5 * 32**0.5) and by[3, "||w|| / sqrt(dim)"] == pytest.approx(0.5)
    norm = float(torch.arange(32.0).norm())
    assert by[4, "||w||"] == pytest.approx(norm) and by[4, "||w|| / sqrt(dim)"] == pytest.approx(norm / 32**0.5)
    every = blocks.measure_skip_weight(net, {}, {"blocks": "all"}, CPU)
    assert sorted(set(every["block"])) == [1, 2, 3, 4, 5, 6]
    assert every.set_index(["block", "quantity"])["value"][1, "||w||"] == pytest.approx(16**0.5)  # w = 1 in R^16


def test_skip_weight_refuses_a_net_without_w_and_an_unknown_choice_of_blocks():
    net = models.build({"arch": "preact_resnet", "depth": 8, "variant": "add", "args": {}, "classes": 3, "in_channels": 1})
    with pytest.raises(ValueError, match=r"^skip_weight: the model has no block with a learned skip weight w \(is the run's variant wskip_ln\?\)$"):
        blocks.measure_skip_weight(net, {}, {"blocks": "middle"}, CPU)
    wskip = models.build({"arch": "preact_resnet", "depth": 8, "variant": "wskip_ln", "args": {}, "classes": 3, "in_channels": 1})
    with pytest.raises(ValueError, match="^skip_weight: blocks='top' is invalid; expected all or middle$"):
        blocks.measure_skip_weight(wskip, {}, {"blocks": "top"}, CPU)


def test_skip_weight_summary_gives_the_papers_two_numbers():
    frame = pd.DataFrame([{"block": b, "quantity": q, "value": v} for b, (n, d) in ((19, (1.2, 0.2)), (20, (1.4, 0.3)))
                          for q, v in (("||w||", n), ("||w|| / sqrt(dim)", d))])
    assert blocks.summarize_skip_weight(frame) == "blocks 19-20: ||w|| 1.30 on average (from 1.20 to 1.40), 0.25 per dimension"


def test_learning_curve_reads_the_asked_columns_of_the_training_log(tmp_path):
    from resrepro.measure import curves

    pd.DataFrame({"epoch": [1, 2, 3], "train_loss": [2.0, 1.0, 0.5], "test_loss": [1.5, 1.2, 1.3], "test_error": [40.0, 30.0, 31.0]}
                 ).to_csv(tmp_path / "train_log.csv", index=False)
    frame = curves.measure_curve(tmp_path, {"quantities": ["train_loss", "test_loss"]})
    assert list(frame.columns) == ["epoch", "quantity", "value"]
    assert frame[frame["quantity"] == "held-out loss"].set_index("epoch")["value"].to_dict() == {1: 1.5, 2: 1.2, 3: 1.3}
    assert frame[frame["quantity"] == "training loss"]["value"].tolist() == [2.0, 1.0, 0.5]
    assert curves.summarize_curve(frame) == ("training loss 2 at epoch 1, 0.5 at epoch 3, lowest 0.5 (epoch 3); "
                                             "held-out loss 1.5 at epoch 1, 1.3 at epoch 3, lowest 1.2 (epoch 2)")
    with pytest.raises(ValueError, match="^learning_curve: 'dev_bleu' is not a column of the training log; allowed: "
                                         "train_loss, test_loss, train_error, test_error$"):
        curves.measure_curve(tmp_path, {"quantities": ["dev_bleu"]})
    with pytest.raises(ValueError, match="'train_error' is not a column"):  # a known quantity that this log lacks
        curves.measure_curve(tmp_path, {"quantities": ["train_error"]})


def test_a_log_measurement_runs_without_a_checkpoint(tmp_path):
    from resrepro.measure.run import run_measurement

    pd.DataFrame({"epoch": [1, 2], "train_loss": [2.0, 1.0], "test_loss": [1.5, 1.4]}).to_csv(tmp_path / "train_log.csv", index=False)
    run_measurement("learning_curve", tmp_path, tmp_path / "no-data.pt", {"quantities": ["test_loss"]}, tmp_path / "out.csv", device="cpu")
    assert pd.read_csv(tmp_path / "out.csv")["value"].tolist() == [1.5, 1.4]


# --- borderline examples (paper 003 Fig. 6) -----------------------------------------------------


def constant_images(normalized_means: list[float]) -> dict:
    """One constant 8x8 image per wanted normalized value m (uint8 v = 255 (0.5 + m / 4)), label 0."""
    v = torch.tensor([round(255 * (0.5 + m / 4)) for m in normalized_means], dtype=torch.uint8)
    x = v[:, None, None, None].expand(-1, 1, 8, 8).contiguous()
    y = torch.zeros(len(v), dtype=torch.long)
    return {"train_x": x, "train_y": y, "test_x": x, "test_y": y, "mean": [0.5], "std": [0.25]}


def test_the_margin_to_flip_is_the_true_class_probability_less_the_largest_other():
    probs = torch.tensor([[0.50, 0.45, 0.05], [0.2, 0.7, 0.1]])
    assert borderline.margin_to_flip(probs, torch.tensor([0, 0])).tolist() == pytest.approx([0.05, -0.5])
    assert borderline.margin_to_flip(probs, torch.tensor([2, 1])).tolist() == pytest.approx([-0.45, 0.5])


def test_borderline_groups_and_what_the_last_block_does_to_them():
    """Logits (s, -s), s = mean(h), label 0: the margin is tanh(s). Block 1 is the identity, block 2
    adds 0.5. Images with s = 0.024 and -0.039 are borderline (|tanh s| < 0.1), s = 0.996 is correct,
    s = -0.996 is wrong by far. Block 2 corrects the borderline wrong one and leaves the far one."""
    d = constant_images([0.02, -0.04, 1.0, -1.0])
    s1 = ((d["test_x"].float() / 255 - 0.5) / 0.25).mean(dim=(1, 2, 3))
    frame = borderline.measure_borderline(Toy([0.0, 0.0], [0.0, 0.5]), d, {
        "examples": 10000, "splits": ["test"], "batch_size": 3, "last_blocks": 2, "margin": 0.1}, CPU)
    by = frame.set_index(["block", "group", "quantity"])["value"]
    assert by[1, "borderline", "accuracy (%)"] == 50.0 and by[2, "borderline", "accuracy (%)"] == 100.0
    assert by[1, "all", "accuracy (%)"] == 50.0 and by[2, "all", "accuracy (%)"] == 75.0
    assert by[1, "correct", "accuracy (%)"] == by[2, "correct", "accuracy (%)"] == 100.0
    assert [by[b, g, "share of examples (%)"] for b in (1, 2) for g in ("borderline", "correct", "all")] == [50, 25, 100] * 2
    loss = lambda s: torch.log1p(torch.exp(-2 * s))  # noqa: E731  (cross-entropy of logits (s, -s), label 0)
    p = lambda s: torch.sigmoid(2 * s)  # noqa: E731
    entropy = lambda s: -(p(s) * p(s).log() + (1 - p(s)) * (1 - p(s)).log())  # noqa: E731
    assert by[1, "borderline", "loss"] == pytest.approx(loss(s1[:2]).mean().item(), rel=1e-5)
    assert by[2, "all", "loss"] == pytest.approx(loss(s1 + 0.5).mean().item(), rel=1e-5)
    assert by[2, "correct", "entropy"] == pytest.approx(entropy(s1[2] + 0.5).item(), rel=1e-4)
    # a group's values are means over its own examples (2 borderline, 1 correct, 4 in all); its share, over the split's 4
    sizes = frame[frame["quantity"] != "share of examples (%)"].groupby("group")["examples"].unique()
    assert {g: list(v) for g, v in sizes.items()} == {"all": [4], "borderline": [2], "correct": [1]}
    assert frame.loc[frame["quantity"] == "share of examples (%)", "examples"].eq(4).all()


def test_the_borderline_margin_is_strict_and_correct_starts_at_it():
    """An example exactly `margin` from flipping is not borderline, and is already correct."""
    d = constant_images([0.02, -0.04, 1.0, -1.0])
    net = Toy([0.0, 0.0], [0.0, 0.5])
    x = (d["test_x"].float() / 255 - 0.5) / 0.25
    first = borderline.margin_to_flip(borderline.logits_after(net, blocks.residual_blocks(net), 0, x).float().softmax(1), d["test_y"])
    settings = {"examples": 10000, "splits": ["test"], "batch_size": 4, "last_blocks": 2, "margin": first[2].item()}
    by = borderline.measure_borderline(net, d, settings, CPU).set_index(["block", "group", "quantity"])["value"]
    assert by[1, "borderline", "share of examples (%)"] == 50.0  # examples 0 and 1, not 2
    assert by[1, "correct", "share of examples (%)"] == 25.0  # example 2, at the margin


def test_an_empty_group_has_no_value():
    frame = borderline.measure_borderline(Toy([0.0, 0.0], [0.0, 0.5]), constant_images([1.0, -1.0]), {
        "examples": 10000, "splits": ["test"], "batch_size": 4, "last_blocks": 2, "margin": 0.1}, CPU)
    assert list(frame.columns) == ["split", "block", "group", "quantity", "value", "examples"]
    empty = frame[(frame["group"] == "borderline") & (frame["quantity"] != "share of examples (%)")]
    assert len(empty) == 6 and empty["value"].isna().all()
    assert set(frame["split"]) == {"test"}


def test_borderline_reads_only_the_last_blocks():
    frame = borderline.measure_borderline(Toy([0.0] * 6, [0.0] * 6), data(), {
        "examples": 10000, "splits": ["test"], "batch_size": 7, "last_blocks": 5, "margin": 0.1}, CPU)
    assert sorted(set(frame["block"])) == [2, 3, 4, 5, 6]


def test_borderline_summary_reads_the_first_and_the_last_block():
    rows = [{"split": "train", "block": b, "group": g, "quantity": q, "value": v}
            for b, k in ((10, 0), (11, 1), (12, 2))
            for (g, q), v in {("borderline", "accuracy (%)"): 40.0 + 10 * k, ("all", "accuracy (%)"): 90.0 + k,
                              ("all", "entropy"): 0.3 - 0.1 * k, ("borderline", "share of examples (%)"): 2.0}.items()]
    assert borderline.summarize_borderline(pd.DataFrame(rows)) == (
        "train: 2.0% of the examples borderline, their accuracy 40% -> 60% over blocks 10-12 "
        "(all examples 90.0% -> 92.0%); entropy 0.300 -> 0.100")


def test_borderline_summary_reads_the_papers_claim():
    rows = [{"split": "test", "block": b, "group": g, "quantity": q, "value": v}
            for b, vals in ((50, {("borderline", "accuracy (%)"): 43.0, ("all", "accuracy (%)"): 93.0, ("all", "entropy"): 0.2,
                                   ("borderline", "share of examples (%)"): 0.5}),
                            (54, {("borderline", "accuracy (%)"): 53.0, ("all", "accuracy (%)"): 93.4, ("all", "entropy"): 0.1,
                                   ("borderline", "share of examples (%)"): 0.5}))
            for (g, q), v in vals.items()]
    assert borderline.summarize_borderline(pd.DataFrame(rows)) == (
        "test: 0.5% of the examples borderline, their accuracy 43% -> 53% over blocks 50-54 "
        "(all examples 93.0% -> 93.4%); entropy 0.200 -> 0.100")


def test_a_summary_of_one_block_or_a_constant_curve_names_why_it_has_no_rank_correlation():
    """A stage of one block (sas-f3's middle stage at a small depth) has no Spearman rho: the summary
    says so, not scipy's nan."""
    assert blocks.summarize_grad_norm(frame_of({"train": [0.4]}, first_block=3)) == (
        "train: blocks 3-3, mean 0.4, lowest block / highest 1.00, Spearman rho with depth none (one block)")
    assert blocks.summarize_grad_norm(frame_of({"train": [0.4, 0.4]})).endswith("Spearman rho with depth none (constant)")
