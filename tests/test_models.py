"""PreAct-ResNet-(6n+2) (He et al. 2016b) with every residual variant the paper tables use.

Sizes are the papers' (depth 110 has 1.7M parameters); behaviour is checked on depth-8 models
(one block per stage) and tiny inputs so the whole file runs in seconds on a CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from resrepro.experiments import load_tables
from resrepro.models import count_parameters
from resrepro.models.preact_resnet import DEPTHS, PreActResNet, blocks_per_stage
from resrepro.residual import ConfigError, variant_id

TABLES = Path(__file__).resolve().parent / "fixtures" / "config" / "tables"


def table_variants() -> list:
    """Each distinct (variant, args) of the tables (tests/fixtures/config/tables) once, as pytest params."""
    seen: dict[str, tuple] = {}
    for table in load_tables(TABLES).values():
        for row in table["rows"]:
            seen.setdefault(variant_id(row["variant"], row.get("args")), (row["variant"], row.get("args") or {}))
    return [pytest.param(name, args, id=vid) for vid, (name, args) in seen.items()]


VARIANTS = table_variants()


def digits_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 1, 8, 8, generator=g), torch.tensor([0, 3, 7, 9])


# --------------------------------------------------------------------------- sizes


def test_preact_resnet_110_has_1_7m_parameters():
    """He et al. 2016b / both papers' CIFAR net: PreAct-ResNet-110 has 1.7M parameters
    (1,730,522 with 1x1 projection shortcuts)."""
    n = count_parameters(PreActResNet(110, 10, "add"))
    print(f"PreAct-ResNet-110 (add, 10 classes): {n:,} parameters")
    assert 1.70e6 <= n <= 1.75e6
    assert n == 1_730_522


def test_preact_resnet_20_has_0_27m_parameters():
    """ResNet-20 (paper 001 Table 6's smallest CIFAR-100 net) has about 0.27M parameters."""
    n = count_parameters(PreActResNet(20, 10, "add"))
    print(f"PreAct-ResNet-20 (add, 10 classes): {n:,} parameters")
    assert 0.26e6 <= n <= 0.28e6


@pytest.mark.parametrize("depth,n", [(20, 3), (32, 5), (44, 7), (56, 9), (110, 18)])
def test_depth_gives_three_stages_of_n_blocks(depth, n):
    """Depth 6n+2: three stages of n basic blocks each (paper 001 Table 6 depths 20..110)."""
    assert depth in DEPTHS
    assert blocks_per_stage(depth) == n
    model = PreActResNet(depth, 100, "add")
    assert len(model.blocks) == 3 * n
    assert model.fc.out_features == 100


@pytest.mark.parametrize("depth", [21, 5, 2, 0])
def test_bad_depth_is_config_error(depth):
    """A depth that is not 6n+2 >= 8 fails as a config error naming the depth."""
    with pytest.raises(ConfigError, match="depth"):
        blocks_per_stage(depth)
    with pytest.raises(ConfigError, match="depth"):
        PreActResNet(depth, 10)


def test_bad_variant_fails_at_construction():
    """A bad variant or argument fails before any block is built."""
    with pytest.raises(ConfigError, match="lam"):
        PreActResNet(8, 10, "xskip", {"lam": -1})
    with pytest.raises(ConfigError, match="nope"):
        PreActResNet(8, 10, "nope")


# --------------------------------------------------------------------------- every table variant


@pytest.mark.parametrize("name,args", VARIANTS)
def test_table_variant_trains_one_step(name, args):
    """Every variant of the paper tables builds into a depth-8 PreAct-ResNet whose logits have shape
    (N, classes) and are finite, whose blocks all use that variant, and one SGD step on
    cross-entropy leaves the loss and all parameters finite and lowers the loss on that batch."""
    torch.manual_seed(0)
    model = PreActResNet(8, 10, name, args, in_channels=1)
    assert all(block.residual.name == name for block in model.blocks)
    model.train()
    x, y = digits_batch()
    logits = model(x)
    assert logits.shape == (4, 10)
    assert torch.isfinite(logits).all()
    loss = F.cross_entropy(logits, y)
    assert torch.isfinite(loss)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    opt.zero_grad()
    loss.backward()
    stem_grad = model.stem.weight.grad
    assert stem_grad is not None and torch.isfinite(stem_grad).all() and stem_grad.abs().sum() > 0
    opt.step()
    for pname, p in model.named_parameters():
        assert torch.isfinite(p).all(), f"{pname} not finite after one step"
    after = F.cross_entropy(model(x), y)
    assert torch.isfinite(after)
    assert after.item() < loss.item()


@pytest.mark.parametrize("name,args", VARIANTS)
def test_table_variant_is_deterministic(name, args):
    """The same seed builds the same model: identical outputs (docs/design.md: same seed, same numbers on CPU)."""
    x, _ = digits_batch()
    outs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = PreActResNet(8, 10, name, args, in_channels=1)
        model.train()
        outs.append(model(x))
    assert torch.equal(outs[0], outs[1])
    torch.manual_seed(1)
    other = PreActResNet(8, 10, name, args, in_channels=1).train()(x)
    assert not torch.equal(outs[0], other)


def test_cifar_input_shape():
    """in_channels=3 on 32x32 images (CIFAR) gives (N, classes) logits."""
    torch.manual_seed(0)
    model = PreActResNet(8, 100, "add", in_channels=3)
    out = model(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 100)
    assert torch.isfinite(out).all()


def test_projection_shortcut_only_where_shape_changes():
    """He et al. 2016b: identity shortcut inside a stage, 1x1 projection at the two stage changes."""
    model = PreActResNet(20, 10, "add")
    projected = [i for i, block in enumerate(model.blocks) if block.shortcut is not None]
    assert projected == [3, 6]
