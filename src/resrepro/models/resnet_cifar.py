"""The original CIFAR ResNet-(6n+2) of He et al. 2016a ("Deep Residual Learning for Image
Recognition", Sec. 4.2): paper 002's "fully-fledged" ResNet-20 and its plain counterpart (Sec. 4.2
and SM D.4.2, Figure 12 (b)).

A 3x3 conv (16 channels) with BN and ReLU, three stages of n blocks (16, 32, 64 channels), global
average pooling and a linear classifier. A block is post-activation, as paper 002 describes it:

    plain:    y = ReLU(BN(conv(ReLU(BN(conv(x))))))    "the concatenation of two groups of
              convolutional layer, Batch Normalization layer, and ReLU"
    residual: y = ReLU(BN(conv(ReLU(BN(conv(x))))) + skip(x))   "adds the input of the first
              convolutional layer to the output of second Batch Normalization layer"

The first block of stages 2 and 3 halves the resolution and doubles the channels; its skip is He et
al.'s option A for CIFAR (the identity at the strided positions, the new channels zero), so
channel i of every stage continues as channel i of the next: the signal-activation path of final
channel i runs through channel i only (`skip_repeats_channels` False; the simplified nets repeat
their channels instead). The skip and branch combine through the residual registry, so `plain`
and `add` are its two forms. He initialisation (fan-out), BN weights 1 and biases 0.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .. import residual
from ..specs import ModelSpec
from .registry import register

STAGE_CHANNELS = (16, 32, 64)


def blocks_per_stage(depth: int) -> int:
    if depth < 8 or (depth - 2) % 6:
        raise residual.ConfigError(f"depth={depth!r} is invalid for the CIFAR ResNet; expected 6n+2 >= 8, e.g. 20")
    return (depth - 2) // 6


class PostActBlock(nn.Module):
    """ReLU(residual(skip(x), BN(conv(ReLU(BN(conv(x))))))) with option A's skip."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, variant: str, args: dict):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.stride, self.extra = stride, out_ch - in_ch
        self.residual = residual.build(variant, out_ch, "conv", args)

    def skip(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, 0, self.extra)) if self.extra else x  # zeros for the new channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branch = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(self.residual(self.skip(x), branch))


class ResNetCIFAR(nn.Module):
    skip_repeats_channels = False  # channel i leads to final channel i only (option A): measure/dominant_flow.py

    def __init__(self, depth: int, num_classes: int, variant: str = "add", args: dict | None = None, in_channels: int = 3):
        super().__init__()
        n, args = blocks_per_stage(depth), residual.validate(variant, args)
        self.stem = nn.Sequential(nn.Conv2d(in_channels, STAGE_CHANNELS[0], 3, 1, 1, bias=False), nn.BatchNorm2d(STAGE_CHANNELS[0]), nn.ReLU())
        blocks, in_ch = [], STAGE_CHANNELS[0]
        for stage, out_ch in enumerate(STAGE_CHANNELS):
            blocks += [PostActBlock(in_ch if i == 0 else out_ch, out_ch, 2 if stage > 0 and i == 0 else 1, variant, args) for i in range(n)]
            in_ch = out_ch
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(in_ch, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.blocks(self.stem(x)).mean(dim=(2, 3)))


@register("resnet_cifar")
def build(spec: ModelSpec) -> ResNetCIFAR:
    return ResNetCIFAR(spec.need("depth"), spec.need("classes"), spec.variant, spec.get("args"), in_channels=spec.get("in_channels", 3))
