"""PreAct-ResNet-(6n+2) for CIFAR (He et al. 2016b, "Identity Mappings in Deep Residual Networks").

Basic blocks (two 3x3 convs), three stages of n blocks with 16/32/64 channels, BN-ReLU before each
conv, a 1x1 projection shortcut where the shape changes, then BN-ReLU, global average pool and a
linear classifier. Depth 110 has 1.7M parameters with `add` (He et al. Table 6: 1.7M).

Every block combines its skip and branch through the residual registry, so the variant is the
only thing that differs between the rows of a table.

Two initialisations (the model spec's `init`, INITS): `fan_out`, He et al. 2016b's released code
(He-normal by fan-out, convolutions without biases; the default), and `he_normal`, paper 003's
("we use He-normal weight initialization as suggested in He et al. (2015), and biases are
initialized to 0": Keras' he_normal, by fan-in, every conv and the classifier with a bias). With
`he_normal` the ResNet-110 has paper 003's 1,742,762 parameters as Keras counts them.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.nn import functional as F

from .. import residual
from ..specs import ModelSpec
from .registry import register

DEPTHS = (20, 32, 44, 56, 110)  # the papers' CIFAR depths; any 6n+2 is accepted
STAGE_CHANNELS = (16, 32, 64)
# init -> (convolutions have biases, He-normal mode, the classifier He-normal too)
INITS = {"fan_out": (False, "fan_out", False), "he_normal": (True, "fan_in", True)}


def blocks_per_stage(depth: int) -> int:
    if depth < 8 or (depth - 2) % 6:
        raise residual.ConfigError(f"depth={depth!r} is invalid; expected 6n+2 >= 8, e.g. {DEPTHS}")
    return (depth - 2) // 6


class PreActBlock(nn.Module):
    """BN-ReLU-conv3x3-BN-ReLU-conv3x3 branch; the projection shortcut (when needed) reads the
    pre-activated input, as in He et al. 2016b's released code."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, variant: str, args: dict, bias: bool = False,
                 place: residual.Place | None = None):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_ch)
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=bias)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=bias)
        self.shortcut = None
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Conv2d(in_ch, out_ch, 1, stride, bias=bias)
        if place is not None and in_ch != out_ch:
            place = dataclasses.replace(place, input_dim=in_ch)
        self.residual = residual.build(variant, out_ch, "conv", args, place)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.residual.branch_input(x)))
        skip = self.shortcut(out) if self.shortcut is not None else x
        branch = self.conv2(F.relu(self.bn2(self.conv1(out))))
        return self.residual(skip, branch)


class PreActResNet(nn.Module):
    def __init__(self, depth: int, num_classes: int, variant: str = "add", args: dict | None = None, in_channels: int = 3,
                 init: str = "fan_out"):
        super().__init__()
        self._build(blocks_per_stage(depth), num_classes, variant, args, in_channels, init)

    def _build(self, n: int, num_classes: int, variant: str, args: dict | None, in_channels: int, init: str) -> None:
        """stem, three stages of `stage_blocks`, BN and the classifier, then He init (INITS)."""
        args = residual.validate(variant, args)
        if init not in INITS:
            raise residual.ConfigError(f"init={init!r} unknown for the PreAct-ResNets; allowed: {', '.join(INITS)}")
        self.conv_bias, mode, classifier_too = INITS[init]
        self.place = residual.Place("net", (("net", 3 * n),), 3 * n)  # what the placed variants need (residual.Place)
        self.stem = nn.Conv2d(in_channels, STAGE_CHANNELS[0], 3, 1, 1, bias=self.conv_bias)
        blocks, in_ch = [], STAGE_CHANNELS[0]
        for stage, out_ch in enumerate(STAGE_CHANNELS):
            blocks += self.stage_blocks(stage, in_ch, out_ch, n, variant, args)
            in_ch = out_ch
        self.blocks = nn.Sequential(*blocks)
        self.bn = nn.BatchNorm2d(in_ch)
        self.fc = nn.Linear(in_ch, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d) or (classifier_too and isinstance(m, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, mode=mode, nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        for m in self.modules():  # after He init, which would undo what a variant does to its branch
            if isinstance(m, PreActBlock):
                m.residual.init_branch([m.conv1.weight, m.conv2.weight])

    def stage_blocks(self, stage: int, in_ch: int, out_ch: int, n: int, variant: str, args: dict) -> list[nn.Module]:
        """A stage's n blocks; the first of stages 2 and 3 halves the resolution and projects."""
        return [PreActBlock(in_ch if i == 0 else out_ch, out_ch, 2 if stage > 0 and i == 0 else 1, variant, args,
                            bias=self.conv_bias, place=self.place) for i in range(n)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.blocks(self.stem(x))
        out = F.relu(self.bn(out)).mean(dim=(2, 3))
        return self.fc(out)


@register("preact_resnet")
def build(spec: ModelSpec) -> PreActResNet:
    return PreActResNet(spec.need("depth"), spec.need("classes"), spec.variant, spec.get("args"), in_channels=spec.get("in_channels", 3),
                        init=spec.get("init", "fan_out"))
