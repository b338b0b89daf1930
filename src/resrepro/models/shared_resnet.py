"""Paper 003 Sec. 4.5: PreAct-ResNets whose top blocks share their weights (Jastrzebski et al. 2018).

"We consider a shared version of Resnet-110 model, where in each stage we share all the residual
blocks from the 5th block. All shared Resnets in this section have therefore a similar number of
parameters as Resnet-38." ResNet-38 has 6 blocks a stage, and Figure 8 speaks of the "naively
shared top 13 layers" of ResNet-110's 18: so each stage keeps 5 blocks of its own, and the 6th
block's two convolutions serve every block above it (13 of 18 blocks at depth 110, 19 of 24 at
146, 25 of 30 at 182). The rest is preact_resnet.py's net: stages of 16/32/64 channels, a
projection at the start of stages 2 and 3, BN-ReLU-pool-linear.

What the shared blocks share besides the convolutions is the strategy, one architecture each:
- shared_resnet_naive: everything, batch normalisation's statistics and gamma/beta included;
- shared_resnet_stats: each application its own BN statistics (gamma/beta shared);
- shared_resnet_stats_gamma: and gamma initialised to 0.1, as recurrent batch normalisation
  (Cooijmans et al. 2016, which the paper builds on);
- shared_resnet_ubn: and gamma/beta of their own too: the paper's Unshared Batch Normalization
  ("initialize gamma to 0.1 and unshare statistics for every step ... we also unshare gamma and beta").
Every application has its own residual combiner (x + F has no parameters), so the per-block
measurements see each application as a block.

Sizes (the paper's depth, or a mini net for 8x8 digits): "110", "146", "182" have 18/24/30 blocks
a stage, 5 of their own; "mini110", "mini146", "mini182" have 5/7/8 blocks a stage (the ratio
18:24:30), 1 of its own, so that a mini stage shares most of its blocks as the paper's does.
"""

from __future__ import annotations

from torch import nn

from .. import residual
from ..specs import ModelSpec
from .preact_resnet import PreActBlock, PreActResNet
from .registry import register

# size -> (blocks a stage, blocks a stage with weights of their own before the shared one)
SIZES = {"110": (18, 5), "146": (24, 5), "182": (30, 5), "mini110": (5, 1), "mini146": (7, 1), "mini182": (8, 1)}
# strategy -> (BN statistics per application, gamma/beta per application, gamma's initial value)
STRATEGIES = {"naive": (False, False, 1.0), "stats": (True, False, 1.0), "stats_gamma": (True, False, 0.1), "ubn": (True, True, 0.1)}


def shared_steps(block: PreActBlock, count: int, strategy: str, variant: str, args: dict) -> list[PreActBlock]:
    """`count` applications of `block` (the first is `block` itself): each a PreActBlock whose
    convolutions are `block`'s, with its BN shared or not as the strategy says."""
    own_stats, own_affine, gamma = STRATEGIES[strategy]
    width = block.conv1.out_channels
    for bn in (block.bn1, block.bn2):
        nn.init.constant_(bn.weight, gamma)
    steps = [block]
    for _ in range(count - 1):
        step = PreActBlock(width, width, 1, variant, args)
        step.conv1, step.conv2 = block.conv1, block.conv2
        for name in ("bn1", "bn2"):
            shared_bn, own_bn = getattr(block, name), getattr(step, name)
            if not own_stats:
                setattr(step, name, shared_bn)
            elif not own_affine:
                own_bn.weight, own_bn.bias = shared_bn.weight, shared_bn.bias
            else:
                nn.init.constant_(own_bn.weight, gamma)
        steps.append(step)
    return steps


class SharedPreActResNet(PreActResNet):
    """preact_resnet.py's net whose stages have `own` blocks of their own, then one block applied
    `blocks - own` times (shared_steps)."""

    def __init__(self, blocks: int, own: int, strategy: str, num_classes: int, variant: str = "add", args: dict | None = None,
                 in_channels: int = 3, init: str = "fan_out"):
        nn.Module.__init__(self)
        self.blocks_per_stage, self.strategy = blocks, strategy
        self._build(own, num_classes, variant, args, in_channels, init)

    def stage_blocks(self, stage: int, in_ch: int, out_ch: int, n: int, variant: str, args: dict) -> list[nn.Module]:
        shared = PreActBlock(out_ch, out_ch, 1, variant, args, bias=self.conv_bias)
        return super().stage_blocks(stage, in_ch, out_ch, n, variant, args) + shared_steps(
            shared, self.blocks_per_stage - n, self.strategy, variant, args)


def _builder(strategy: str):
    name = f"shared_resnet_{strategy}"

    def build(spec: ModelSpec) -> SharedPreActResNet:
        size = str(spec.need("size"))
        if size not in SIZES:
            raise residual.ConfigError(f"{name}: size {size!r} unknown; allowed: {', '.join(SIZES)}")
        blocks, own = SIZES[size]
        return SharedPreActResNet(blocks, own, strategy, spec.need("classes"), spec.variant, spec.get("args"), spec.get("in_channels", 3),
                                  spec.get("init", "fan_out"))

    return register(name)(build)


for _strategy in STRATEGIES:
    _builder(_strategy)
