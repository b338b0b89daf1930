"""An example of a residual variant defined outside the package (README, "Bring your own residual").

y = x + g * F, with g = sigmoid(c) a learned scalar gate, c initialised at `logit` (default -2, so
that g starts near 0.12). Use it in every selected table:

    snakemake --cores 8 --config variant_modules='[examples/residuals/gated_add.py]' \\
        extra_rows='[{variant: gated_add}, {variant: gated_add, args: {logit: 0}}]'
"""

import torch
from torch import nn

from resrepro import residual
from resrepro.catalog import Param


@residual.register_external("gated_add", {"logit": Param(float, -2.0, rule="a number")})
class GatedAdd(residual.Residual):
    def __init__(self, dim, layout, logit):
        super().__init__(dim, layout)
        self.logit = nn.Parameter(torch.tensor(float(logit)))

    def forward(self, x, f):
        return x + torch.sigmoid(self.logit) * f
