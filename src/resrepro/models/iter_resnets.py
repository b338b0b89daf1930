"""Paper 003's three nets for its per-block analyses (Jastrzebski et al. 2018, Sec. 4), beside the
original PreAct-ResNet-110 (preact_resnet.py).

All three stack pre-activation blocks, BN-ReLU-conv3x3-BN-ReLU-conv3x3, whose outputs combine with
an identity skip through the residual registry (paper 003 uses x + F: variant `add`), and end in
the paper's classifier: "BatchNorm→ReLU→AveragePool(8,8)→Flatten→Fully-Connected-Layer(#Classes)".
On the single-representation net's 32x32 maps that pool leaves 4x4 of them (1,600 features); on
maps of 8x8 or less (the other two nets, and every net on 8x8 digits) it averages the whole map,
as Keras' 'same' padding would, so the model spec carries the input's `image_size`. Following the
paper: every conv has a bias, weights are He-normal ("He et al. (2015)", fan-in, as Keras'
he_normal) and biases 0.

- single_rep_resnet: "a 3x3 convolution layer with 100 filters ... followed by 10 residual blocks
  such that all hidden representations have the same height and width": no change of width or
  resolution anywhere, so every block is an identity block.
- avgpool_resnet: the single-representation stack repeated three times with 150 filters and "a
  2x2 average pooling layer after each set of 10 residual blocks" (the third before the classifier).
- wide_resnet: "a 3x3 convolution layer followed by 3 stages of four residual blocks with 160, 320
  and 640 filters". Sec. 4.2 counts "two 1x1 (shortcut) convolution layers" in its main path: the
  stem gives 160 channels, and a strided 1x1 conv between stages changes width and resolution, so
  that all 12 blocks have identity skips (as in the paper's Figure 1).

Sizes: "paper" is the paper's; "mini" fits scikit-learn's 8x8 digits on a CPU (config/mini.yaml
maps the paper's size to it): the same block counts, narrower (32 filters; wide 32/64/128).

Parameters: the paper counts as Keras does, BN's running statistics included (4 numbers per
channel); `keras_count` gives it. The avg-pooling net has the paper's 12,201,310 and the
single-representation net its 1,829,210 exactly; the wide net counts 39,022,410 (the paper:
45,732,842; docs/parameters.md).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .. import residual
from ..specs import MISSING, ModelSpec
from .preact_resnet import PreActBlock
from .registry import register

CLASSIFIER_POOL = 8  # the classifier's AveragePool(8,8)
# (filters per stage, blocks per stage, 2x2 average pooling after each stage, strided 1x1 between stages)
SIZES = {
    "single_rep_resnet": {"paper": ((100,), 10, False), "mini": ((32,), 10, False)},
    "avgpool_resnet": {"paper": ((150, 150, 150), 10, True), "mini": ((32, 32, 32), 10, True)},
    "wide_resnet": {"paper": ((160, 320, 640), 4, False), "mini": ((32, 64, 128), 4, False)},
}


class StagedResNet(nn.Module):
    """stem conv -> stages of identity pre-activation blocks (between stages: 2x2 average pooling,
    or a strided 1x1 conv where the width changes) -> BN-ReLU-pool-linear."""

    def __init__(self, widths: tuple[int, ...], blocks: int, pool: bool, num_classes: int, variant: str,
                 args: dict | None, in_channels: int, image_size: int):
        super().__init__()
        args = residual.validate(variant, args)
        self.stem = nn.Conv2d(in_channels, widths[0], 3, 1, 1)
        layers: list[nn.Module] = []
        side = image_size  # the maps' height and width
        for stage, width in enumerate(widths):
            if stage > 0 and width != widths[stage - 1]:
                layers.append(nn.Conv2d(widths[stage - 1], width, 1, 2))  # the shortcut layer between stages
                side = (side + 1) // 2
            layers += [PreActBlock(width, width, 1, variant, args, bias=True) for _ in range(blocks)]
            if pool:
                layers.append(nn.AvgPool2d(2))
                side //= 2
        self.body = nn.Sequential(*layers)
        self.bn = nn.BatchNorm2d(widths[-1])
        self.pool = min(CLASSIFIER_POOL, side)
        self.fc = nn.Linear(widths[-1] * (side // self.pool) ** 2, num_classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(self.stem(x))
        return self.fc(F.avg_pool2d(F.relu(self.bn(out)), self.pool).flatten(1))


def keras_count(model: nn.Module) -> int:
    """Parameters as Keras counts them (the paper's figures): weights plus BN's running mean and variance."""
    stats = sum(m.running_mean.numel() + m.running_var.numel() for m in model.modules() if isinstance(m, nn.BatchNorm2d))
    return sum(p.numel() for p in model.parameters()) + stats


def _builder(name: str):
    def build(spec: ModelSpec) -> StagedResNet:
        sizes = SIZES[name]
        if spec.size not in sizes:
            raise residual.ConfigError(f"{name}: size {spec.size!r} unknown; allowed: {', '.join(sizes)}")
        if spec.image_size is MISSING:  # the classifier's input depends on it: 1,600 features or 100 at paper size
            raise residual.ConfigError(f"{name}: the model spec needs the input's image_size (the classifier's AveragePool(8,8) reads it)")
        widths, blocks, pool = sizes[spec.size]
        return StagedResNet(widths, blocks, pool, spec.need("classes"), spec.variant, spec.get("args"), spec.get("in_channels", 3), spec.image_size)

    return register(name)(build)


for _name in SIZES:
    _builder(_name)
