"""Paper 002's simplified nets (Identity Connections in Residual Nets Improve Noise Stability,
Sec. 2 and SM A), and the exact mapping between their plain and residual forms (Sec. 3).

A net of depth L = 3n + 2: a 3x3 conv with ReLU (16 channels), three groups of n depth-1 blocks
(16, 32, 64 channels), global average pooling and a linear classifier. No batch norm. A block is

    plain:    y = ReLU(conv(x))
    residual: y = ReLU(conv(x) + skip(x))      (variant `add` of the residual registry)

The first conv of groups 2 and 3 doubles the channels and halves the resolution (stride 2). Its
skip is what adding 1 at that conv's ID entries adds (SM D.3: "both the upper matrix and lower
matrix" of the rectangular kernel are diagonal): the input at the strided positions, its c
channels repeated twice to give 2c. So every residual block, including those two, is a plain
block with 1 added to its ID entries, and the mapping below is exact for the whole net. A 1x1
projection or zero padding (He et al.'s options B and A) would not be a plain conv plus ID
entries, and the paper's equivalence would not hold.

ID entries (Sec. 3): the centre tap of kernel [o, o mod c_in], for every output channel o.

Initialisations (SM A), biases 0:
- KWI (He et al. 2015), the plain nets: w ~ N(0, 2 / (k^2 c_in)), fan-in.
- HMWI (Hardt & Ma 2017), the residual nets: w ~ N(0, (1 / (k^2 c_out))^2), "typically much
  smaller" than KWI. The text does not say which channel count c is; with c the output channels
  (and PyTorch's default init for the classifier, which the paper does not describe) the weight-
  decay term of a depth-20 plain net is about 263 times the residual net's, against the paper's
  268 (SM Table 4); with c the input channels it is about 224. docs/noise.md has the arithmetic.
- `init="equivalent"` (SM B): a plain net started from the mapped HMWI residual init, drawn from
  the same random stream as the residual run of that seed, so the two nets start equal.

`simple_net_diagonal` (SM D.3, Table 5) keeps only the dominant flow: each conv of a block has
non-zero kernels only on its diagonal, [o, o mod c_in] (both halves of a rectangular kernel).
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from .. import residual
from ..specs import ModelSpec
from .registry import register

DEPTHS = (20, 32, 44)  # the paper's; any 3n + 2 >= 5 is accepted
GROUP_CHANNELS = (16, 32, 64)
INITS = ("paper", "equivalent")  # paper: KWI for plain, HMWI for residual nets; equivalent: see the docstring


def blocks_per_group(depth: int) -> int:
    if depth < 5 or (depth - 2) % 3:
        raise residual.ConfigError(f"depth={depth!r} is invalid for the simplified nets; expected 3n+2 >= 5, e.g. {DEPTHS}")
    return (depth - 2) // 3


def diagonal_mask(out_ch: int, in_ch: int, k: int) -> torch.Tensor:
    """1 on the whole k x k kernel [o, o mod in_ch] for every o, 0 elsewhere."""
    mask = torch.zeros(out_ch, in_ch, k, k)
    mask[torch.arange(out_ch), torch.arange(out_ch) % in_ch] = 1.0
    return mask


def id_entries(weight: torch.Tensor) -> torch.Tensor:
    """A tensor like `weight` (out, in, k, k) with 1 at the ID entries, the centre of [o, o mod in]."""
    out_ch, in_ch, kh, kw = weight.shape
    ids = torch.zeros_like(weight)
    ids[torch.arange(out_ch), torch.arange(out_ch) % in_ch, kh // 2, kw // 2] = 1.0
    return ids


class SimpleBlock(nn.Module):
    """ReLU(residual(skip(x), conv(x))): one 3x3 conv; the skip repeats the strided input's
    channels to the conv's width (the identity its ID entries add)."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, variant: str, diagonal: bool = False):
        super().__init__()
        if out_ch % in_ch:
            raise ValueError(f"a block from {in_ch} to {out_ch} channels has no ID entries: {out_ch} is not a multiple of {in_ch}")
        self.conv = nn.Conv2d(in_ch, out_ch, 3, stride, 1)
        self.stride, self.repeat = stride, out_ch // in_ch
        self.register_buffer("mask", diagonal_mask(out_ch, in_ch, 3) if diagonal else None)
        self.residual = residual.build(variant, out_ch, "conv", {})

    def skip(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride, :: self.stride]  # the centre taps of a stride-s, padding-1 3x3 conv
        return x.repeat(1, self.repeat, 1, 1) if self.repeat > 1 else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.conv.weight if self.mask is None else self.conv.weight * self.mask
        return F.relu(self.residual(self.skip(x), F.conv2d(x, weight, self.conv.bias, self.stride, 1)))


class SimpleNet(nn.Module):
    """stem conv3x3-ReLU, three groups of n SimpleBlocks, global average pool, linear."""

    skip_repeats_channels = True  # channel c leads to channels c and c + C of a widening block (measure/dominant_flow.py)

    def __init__(self, depth: int, num_classes: int, variant: str = "plain", in_channels: int = 3, diagonal: bool = False):
        super().__init__()
        if variant not in ("plain", "add"):
            raise residual.ConfigError(f"variant={variant!r}: the simplified nets are plain (`plain`) or residual (`add`)")
        n = blocks_per_group(depth)
        self.variant = variant
        self.decays_to_identity = False  # set by `equivalent` on a plain net mapped from a residual one (SM B)
        self.stem = nn.Conv2d(in_channels, GROUP_CHANNELS[0], 3, 1, 1)
        blocks, in_ch = [], GROUP_CHANNELS[0]
        for group, out_ch in enumerate(GROUP_CHANNELS):
            blocks += [SimpleBlock(in_ch if i == 0 else out_ch, out_ch, 2 if group > 0 and i == 0 else 1, variant, diagonal) for i in range(n)]
            in_ch = out_ch
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.blocks(F.relu(self.stem(x)))
        return self.fc(out.mean(dim=(2, 3)))

    def convs(self) -> list[nn.Conv2d]:
        """The stem, then each block's conv: the net's convolutional layers in order."""
        return [self.stem] + [block.conv for block in self.blocks]

    def decay_targets(self) -> dict[nn.Parameter, torch.Tensor]:
        """The weight-decay penalty's centre per weight: 0 everywhere (the default) except, in a
        plain net trained equivalently to a residual one (SM B), the blocks' ID entries: its
        penalty is ||w - I||^2, the residual net's ||w||^2."""
        if not self.decays_to_identity:
            return {}
        return {block.conv.weight: id_entries(block.conv.weight.detach()) for block in self.blocks}


def kwi_(model: SimpleNet) -> None:
    """He et al. 2015: N(0, 2 / (k^2 c_in)) for every conv, biases 0."""
    for conv in model.convs():
        nn.init.kaiming_normal_(conv.weight, mode="fan_in", nonlinearity="relu")
        nn.init.zeros_(conv.bias)


def hmwi_(model: SimpleNet) -> None:
    """Hardt & Ma 2017: N(0, (1 / (k^2 c_out))^2) for every conv, biases 0."""
    for conv in model.convs():
        out_ch, _, kh, kw = conv.weight.shape
        nn.init.normal_(conv.weight, 0.0, 1.0 / (kh * kw * out_ch))
        nn.init.zeros_(conv.bias)


def equivalent(model: SimpleNet, variant: str) -> SimpleNet:
    """The net of the other form computing the same function (Sec. 3, equation 1): plain weights
    are residual weights plus 1 at the ID entries of every block; the stem, biases and classifier
    are shared as they are. Exact in exact arithmetic; in floating point up to rounding."""
    if variant == model.variant:
        return copy.deepcopy(model)
    sign = 1.0 if variant == "plain" else -1.0
    mapped = copy.deepcopy(model)
    mapped.variant = variant
    for block in mapped.blocks:
        block.residual = residual.build(variant, block.conv.out_channels, "conv", {})
        with torch.no_grad():
            block.conv.weight.add_(id_entries(block.conv.weight), alpha=sign)
    mapped.decays_to_identity = variant == "plain"
    return mapped


def build_simple_net(spec: ModelSpec, diagonal: bool) -> SimpleNet:
    variant, init = spec.variant, spec.get("init", "paper")
    if init not in INITS:
        raise residual.ConfigError(f"init={init!r} unknown for the simplified nets; allowed: {', '.join(INITS)}")
    if init == "equivalent" and variant != "plain":
        raise residual.ConfigError("init=equivalent starts a plain net from the mapped residual init: its variant must be `plain`")
    # equivalent: the residual run's init, from the same random stream, so the two runs of a seed start equal
    drawn = "add" if init == "equivalent" else variant
    model = SimpleNet(spec.need("depth"), num_classes=spec.need("classes"), variant=drawn, in_channels=spec.get("in_channels", 3), diagonal=diagonal)
    (kwi_ if drawn == "plain" else hmwi_)(model)
    if diagonal:  # the weights off the diagonal are 0, not merely unused: the weight mass counts them
        with torch.no_grad():
            for block in model.blocks:
                block.conv.weight.mul_(block.mask)
    return equivalent(model, "plain") if init == "equivalent" else model


@register("simple_net")
def _build(spec: ModelSpec) -> SimpleNet:
    return build_simple_net(spec, diagonal=False)


@register("simple_net_diagonal")
def _build_diagonal(spec: ModelSpec) -> SimpleNet:
    return build_simple_net(spec, diagonal=True)
