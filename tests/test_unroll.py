"""Paper 003 Sec. 4.4 (measure/unroll.py): the last block unrolled for extra steps, on nets whose
answers are known by hand."""

import pandas as pd
import pytest
import torch
from torch import nn

from resrepro import models, residual
from resrepro.measure import unroll
from resrepro.measure.unroll import measure_unroll, measure_unroll_blocks, summarize_unroll, summarize_unroll_blocks, unrolled

from test_blocks import Toy, data, sign_labels

SETTINGS = {"examples": 10000, "splits": ["test"], "batch_size": 7, "steps": 3, "scale": 0.5, "margin": 0.1}
CPU = torch.device("cpu")


class Block(nn.Module):
    """h -> h + (c h + b), its combiner a child of its own (as in every registered net)."""

    def __init__(self, c: float, b: float = 0.0):
        super().__init__()
        self.c, self.b = c, b
        self.residual = residual.build("add", 1, "conv", {})

    def forward(self, h):
        return self.residual(h, self.c * h + self.b)


class Net(nn.Module):
    """Blocks in a row; logits (s, -s) from s = the mean of the last h (as test_blocks.Toy)."""

    def __init__(self, *blocks: Block):
        super().__init__()
        self.blocks = nn.Sequential(*blocks)
        self.unused = nn.Parameter(torch.zeros(()))  # so that activations may require grad

    def forward(self, x):
        s = self.blocks(x + 0 * self.unused).mean(dim=(1, 2, 3))
        return torch.stack([s, -s], dim=1)


def inputs(n=6):
    return (data(n)["test_x"].float() / 255 - 0.5) / 0.25


def test_each_extra_step_adds_the_scaled_branch_of_the_last_block():
    """Block 2 (c = -0.5) halves h; each extra step adds 0.5 * (-0.5 h): a factor 0.75."""
    x = inputs()
    s = x.mean(dim=(1, 2, 3))
    net = Net(Block(0.0), Block(-0.5))
    for steps in (0, 1, 3):
        with unrolled(net, steps, 0.5, -1):
            got = net(x)[:, 0]
        assert torch.allclose(got, s * 0.5 * 0.75 ** steps)  # trained: x (1 - 0.5); each step: (1 - 0.25)
    assert torch.allclose(net(x)[:, 0], s * 0.5)  # the hooks are gone afterwards


def test_every_step_stacks_the_logits_of_each_number_of_steps():
    net, x = Net(Block(0.3), Block(-0.4, 0.2)), inputs(5)
    with unrolled(net, 4, 0.5, -1, every_step=True):
        stacked = net(x).unflatten(0, (5, len(x)))
    for steps in range(5):
        with unrolled(net, steps, 0.5, -1):
            assert torch.allclose(stacked[steps], net(x), atol=1e-6)


def test_a_combiner_outside_a_block_module_is_refused():
    with pytest.raises(ValueError, match="not inside a block module of its own"):
        with unrolled(Toy([1.0]), 2, 0.5, -1):  # Toy's combiners sit in a ModuleList, never called
            pass


def test_accuracy_alternates_when_each_step_flips_the_sign():
    """The last block maps h to -h (c = -2) and the labels are what the trained net says: every
    unscaled extra step flips every prediction."""
    frame = measure_unroll(Net(Block(-2.0)), data(30, sign_labels), {**SETTINGS, "scale": 1.0}, CPU)
    acc = frame[(frame["group"] == "all") & (frame["quantity"] == "accuracy (%)")].set_index("step")["value"]
    assert acc.to_dict() == {0: 100.0, 1: 0.0, 2: 100.0, 3: 0.0}
    assert set(frame["group"]) == {"borderline", "correct", "all"}


def test_groups_are_fixed_on_the_net_as_trained():
    frame = measure_unroll(Net(Block(-2.0)), data(30, sign_labels), {**SETTINGS, "scale": 1.0}, CPU)
    share = frame[frame["quantity"] == "share of examples (%)"]
    assert share.groupby("group")["value"].nunique().eq(1).all()  # the same at every step
    correct = frame[(frame["group"] == "correct") & (frame["quantity"] == "accuracy (%)")].set_index("step")["value"]
    assert correct[0] == 100.0 and correct[1] == 0.0  # right as trained, all flipped by one step


def test_the_extra_steps_are_numbered_after_the_trained_blocks_with_their_scaled_change():
    """F = c h: the ratio is |c| on a trained block and |s c| on an extra step."""
    frame = measure_unroll_blocks(Net(Block(0.5), Block(-0.4)), data(), {**SETTINGS, "scale": 0.5}, CPU)
    ratio = frame[frame["quantity"] == "||F(h)|| / ||h||"].pivot_table(index="block", columns="scale", values="value")
    assert list(ratio.index) == [1, 2, 3, 4, 5] and list(ratio.columns) == [0.5, 1.0]
    assert ratio[0.5].tolist() == pytest.approx([0.5, 0.4, 0.2, 0.2, 0.2])
    assert ratio[1.0].tolist() == pytest.approx([0.5, 0.4, 0.4, 0.4, 0.4])
    steps = frame.drop_duplicates("block").set_index("block")["extra_step"]
    assert steps.to_dict() == {1: 0, 2: 0, 3: 1, 4: 2, 5: 3}


def test_a_constant_push_along_minus_the_gradient_has_cosine_minus_one_on_every_step():
    """F = +1 and labels 0: every block, trained or extra, moves h along -dL/dh."""
    frame = measure_unroll_blocks(Net(Block(0.0, 1.0)), data(), SETTINGS, CPU)
    cos = frame[frame["quantity"] == "cos(F(h), dL/dh)"]["value"]
    assert len(cos) == 2 * 4 and cos.tolist() == pytest.approx([-1.0] * 8, abs=1e-6)


def test_unroll_measures_a_registered_resnet():
    net = models.build({"arch": "preact_resnet", "depth": 14, "variant": "add", "args": {}, "classes": 2, "in_channels": 1}).eval()
    frame = measure_unroll(net, data(), SETTINGS, CPU)
    assert sorted(set(frame["step"])) == [0, 1, 2, 3] and frame[frame["group"] == "all"]["value"].notna().all()
    blocks = measure_unroll_blocks(net, data(), SETTINGS, CPU)
    assert blocks["block"].max() == 6 + 3 and blocks["value"].notna().all()
    assert all(p.grad is None for p in net.parameters())


def steps_frame(rows: dict) -> pd.DataFrame:
    return pd.DataFrame([{"split": "test", "step": step, "group": g, "quantity": q, "value": v} for (step, g, q), v in rows.items()])


def test_unroll_summary_reads_borderline_and_all_examples_first_and_last_step():
    rows = {}
    for step, (b, a, loss) in enumerate([(40.0, 90.0, 0.5), (45.0, 90.5, 0.45), (55.0, 91.0, 0.4)]):
        rows |= {(step, "borderline", "accuracy (%)"): b, (step, "all", "accuracy (%)"): a, (step, "all", "loss"): loss,
                 (step, "borderline", "share of examples (%)"): 5.0}
    assert summarize_unroll(steps_frame(rows)) == ("test: over 2 extra steps, borderline examples (5.0%) 40% -> 55% right, "
                                                   "all examples 90.0% -> 91.0%, loss 0.5000 -> 0.4000")


def test_unroll_blocks_summary_counts_negative_extra_steps_per_scale():
    rows = []
    for scale, cos in ((1.0, [-0.2, -0.1, 0.1, 0.3]), (0.05, [-0.2, -0.1, -0.1, -0.05])):
        for block, c in enumerate(cos, start=1):
            extra = max(0, block - 1)
            rows += [{"split": "test", "scale": scale, "block": block, "extra_step": extra, "quantity": "cos(F(h), dL/dh)", "value": c},
                     {"split": "test", "scale": scale, "block": block, "extra_step": extra, "quantity": "||F(h)|| / ||h||", "value": scale * block}]
    text = summarize_unroll_blocks(pd.DataFrame(rows).assign(unrolled_block=1))
    assert text == ("block 1 unrolled; test, scale 1: cos negative on 1 of 3 extra steps (first not negative: step 2), -0.100 at the first, +0.300 at the last; "
                    "||F(h)|| / ||h|| 2 -> 4; test, scale 0.05: cos negative on 3 of 3 extra steps, -0.100 at the first, -0.050 at the last; "
                    "||F(h)|| / ||h|| 0.1 -> 0.2")


def resnet(depth: int):
    return models.build({"arch": "preact_resnet", "depth": depth, "variant": "add", "args": {}, "classes": 2, "in_channels": 1}).eval()


def test_the_unrolled_block_is_the_last_that_keeps_its_inputs_shape():
    x = inputs(2)
    assert unroll.unrollable(resnet(14), x) == 5  # two blocks per stage: the net's last block
    assert unroll.unrollable(resnet(8), x) == 0  # one per stage: stages 2 and 3 start with a projection


def test_extra_steps_of_an_earlier_block_are_numbered_after_the_nets_blocks():
    frame = measure_unroll_blocks(resnet(8), data(), SETTINGS, CPU)
    steps = frame.drop_duplicates("block").set_index("block")["extra_step"].to_dict()
    assert steps == {1: 0, 2: 0, 3: 0, 4: 1, 5: 2, 6: 3}
    assert frame["unrolled_block"].eq(1).all()
    unrolled_ratio = frame[(frame["quantity"] == "||F(h)|| / ||h||") & (frame["scale"] == 0.5)].set_index("block")["value"]
    plain_ratio = frame[(frame["quantity"] == "||F(h)|| / ||h||") & (frame["scale"] == 1.0)].set_index("block")["value"]
    assert unrolled_ratio[1] == pytest.approx(plain_ratio[1])  # the trained block runs as trained
    assert unrolled_ratio[4] == pytest.approx(0.5 * plain_ratio[4])  # the first extra step: the same input, its branch halved


def test_unroll_rows_name_each_groups_size_and_an_empty_group_has_no_value():
    """Images far from the boundary: no borderline example, so that group's values are NaN and its share 0."""
    from test_blocks import constant_images

    d = constant_images([2.0, -2.0, 1.5, -1.5])
    d["test_y"] = (d["test_x"].float().mean(dim=(1, 2, 3)) >= 128).long()  # what the flipping block predicts
    frame = measure_unroll(Net(Block(-2.0)), d, {**SETTINGS, "scale": 1.0}, CPU)
    assert list(frame.columns) == ["split", "step", "group", "quantity", "value", "examples", "unrolled_block"]
    assert frame["unrolled_block"].eq(1).all()
    # a group's values are means over its own examples (none borderline here); its share, over the split's 4
    values = frame[frame["quantity"] != "share of examples (%)"]
    assert values.loc[values["group"] == "borderline", "examples"].eq(0).all() and values.loc[values["group"] == "all", "examples"].eq(4).all()
    assert frame.loc[frame["quantity"] == "share of examples (%)", "examples"].eq(4).all()
    share = frame[frame["quantity"] == "share of examples (%)"].pivot_table(index="step", columns="group", values="value")
    assert list(share.index) == [0, 1, 2, 3]
    assert (share["all"] == 100.0).all() and (share["borderline"] == 0.0).all() and (share["correct"] == 100.0).all()
    borderline = frame[(frame["group"] == "borderline") & (frame["quantity"] != "share of examples (%)")]
    assert borderline["value"].isna().all() and len(borderline) == 4 * 3


def test_unroll_blocks_rows_have_their_columns():
    frame = measure_unroll_blocks(Net(Block(0.5)), data(), SETTINGS, CPU)
    assert list(frame.columns) == ["split", "scale", "block", "extra_step", "unrolled_block", "quantity", "value", "examples"]
    assert frame["examples"].eq(20).all()
