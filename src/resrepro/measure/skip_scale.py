"""Paper 001 Sec. 4.3: the learned effective scale of the skip (Liu et al. 2020: "2.82 and 2.64
for 2xSkip+LN and 2rSkip+LN, respectively, averaged over the shown blocks", Figure 3's middle blocks).

The paper does not define it beyond its Appendix A, which writes a block's output as an affine
function of x and F with the norms' statistics held fixed. Each norm is
N_j(z) = w_j * (z - mu_j) / sigma_j + b_j (w_j, b_j its affine parameters, per channel; mu_j,
sigma_j its statistics: per example for LN, GroupNorm(1) on images; BN's running ones in eval mode).
The effective scale of the skip is the coefficient of x in the block's output y:

    xSkip+N,  y = N(lam x + F):                     s = lam * w / sigma
    rSkip+N,  y_1 = N_1(x + F), y_i = N_i(x + y_{i-1}):
              c_1 = w_1 / sigma_1,  c_i = (w_i / sigma_i) * (1 + c_{i-1}),   s = c_lam

(for lam = 2, s = w_2/sigma_2 + w_2 w_1 / (sigma_2 sigma_1), the coefficient of x in Eq. 5).
s = 1 would be the plain residual x + F that the paper says the norm does not regress to;
x + F and xSkip without a norm have the constant s = 1 and s = lam. Per block, s is averaged
over channels and examples; `blocks: middle` keeps the middle stage's blocks, as Figure 3.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch import nn

from ..residual import Add, RSkipBN, RSkipLN, XSkip, XSkipBN, XSkipLN
from . import register
from .blocks import batches, middle_stage, require_blocks, splits_of


def norm_scale(norm: nn.Module, z: torch.Tensor) -> torch.Tensor:
    """w / sigma of a norm for its input z, shaped to broadcast as (N, C): LN on images
    (GroupNorm(1)): sigma per example; BN in eval mode: its running sigma per channel."""
    w = norm.weight.detach().float()
    if isinstance(norm, nn.GroupNorm) and norm.num_groups == 1:
        sigma = (z.float().flatten(1).var(dim=1, unbiased=False) + norm.eps).sqrt()
        return w[None, :] / sigma[:, None]
    if isinstance(norm, nn.BatchNorm2d) and not norm.training:
        return (w / (norm.running_var.float() + norm.eps).sqrt())[None, :]
    raise ValueError(f"skip_scale: no effective scale for a {type(norm).__name__} (LN on images or BN in eval mode)")


def effective_scale(block: nn.Module, x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """s of the module docstring for one combiner and its inputs, per (example, channel)."""
    if isinstance(block, (XSkipLN, XSkipBN)):
        return block.lam * norm_scale(block.norm, block.lam * x + f)
    if isinstance(block, (RSkipLN, RSkipBN)):
        y, c = f, None
        for norm in block.norms:
            ratio = norm_scale(norm, x + y)
            c = ratio if c is None else ratio * (1 + c)
            y = norm(x + y)
        return c
    if isinstance(block, (Add, XSkip)):  # no norm: the constant coefficient
        return torch.full((1, 1), float(getattr(block, "lam", 1.0)))
    raise ValueError(f"skip_scale: no effective scale defined for variant {block.name!r}; defined: add, xskip, xskip_ln, xskip_bn, rskip_ln, rskip_bn")


def measure_skip_scale(model: nn.Module, data: dict, settings: dict, device: torch.device) -> pd.DataFrame:
    """Rows (split, block, quantity, value, examples): the mean effective scale of each block's skip."""
    blocks = require_blocks(model, "skip_scale")
    if settings["blocks"] not in ("all", "middle"):
        raise ValueError(f"skip_scale: blocks={settings['blocks']!r} is invalid; expected all or middle")
    seen: list = [None] * len(blocks)

    def hook_for(i):
        def hook(module, inputs, output):
            seen[i] = (inputs[0], inputs[1], tuple(output.shape[1:]))
        return hook

    handles = [b.register_forward_hook(hook_for(i)) for i, b in enumerate(blocks)]
    sums, counts, kept = {}, {}, None
    model.eval()
    try:
        with torch.no_grad():
            for split in settings["splits"]:
                counts[split] = 0
                for x, y in batches(data, split, settings, device):
                    model(x)
                    if kept is None:
                        shapes = [shape for _, _, shape in seen]
                        kept = middle_stage(shapes) if settings["blocks"] == "middle" else list(range(len(blocks)))
                    counts[split] += len(y)
                    for i in kept:
                        h, f, _ = seen[i]
                        s = effective_scale(blocks[i], h, f).expand(len(y), -1)
                        sums[split, i + 1] = sums.get((split, i + 1), 0.0) + s.mean(dim=1).sum().item()
    finally:
        for handle in handles:
            handle.remove()
    return pd.DataFrame([{"split": split, "block": block, "quantity": "effective scale of the skip", "value": total / counts[split],
                          "examples": counts[split]} for (split, block), total in sums.items()])


def summarize_skip_scale(frame: pd.DataFrame) -> str:
    """The paper's number: the mean over the blocks shown, and its range."""
    parts = []
    for split in splits_of(frame):
        by = frame[frame["split"] == split].groupby("block")["value"].mean().sort_index()
        parts.append(f"{split}: blocks {by.index[0]}-{by.index[-1]}, mean effective scale {by.mean():.2f} (from {by.min():.2f} to {by.max():.2f})")
    return "; ".join(parts)


register("skip_scale", measure=measure_skip_scale, summarize=summarize_skip_scale)
