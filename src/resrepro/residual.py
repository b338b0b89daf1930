"""The registry of residual connections: every way the papers combine a skip x with a branch F.

Each variant is one small module `forward(x, f) -> y`, chosen by name from a table row
(`variant: rskip_ln, args: {lam: 2}`). Models never special-case a variant: a block builds its
combiner with `build(name, dim, layout, args)`, computes its skip `x` and branch output `f`, and
hands both to it. Adding a variant is one class with one `@register` line here, and its arguments
in catalog.VARIANTS (declared without torch, so that parsing the workflow checks them cheaply).

Layouts decide what "LN", "BN" and "pool for a gate" mean:
- "conv" (N, C, H, W): LN normalizes over (C, H, W) per example with a per-channel affine
  (GroupNorm with one group), BN is BatchNorm2d, and gates pool over space so that each gate
  is one scalar per example (paper 000 Fig. 3 averages the gates over examples).
- "seq" (N, T, D): LN is LayerNorm over D, gates are computed per token. BN is not defined.

Notation follows the papers: `lam` is lambda of paper 001 Eq. (1)-(4), `k` the factor on F of
paper 001 Table 3, `a` and `b` are alpha and beta of paper 000 Eq. (3)-(4).
"""

from __future__ import annotations

import torch
from torch import nn

from .catalog import VARIANTS, ConfigError, Param, validate, variant_id  # noqa: F401  (the registry's checks)

LAYOUTS = ("conv", "seq")

REGISTRY: dict[str, type["Residual"]] = {}


def register(name: str):
    """The class of a variant declared in catalog.VARIANTS, which gives it its arguments."""

    def add(cls):
        if name not in VARIANTS:
            raise ValueError(f"variant {name!r}: declare its arguments in catalog.VARIANTS first")
        cls.name, cls.params = name, VARIANTS[name]
        REGISTRY[name] = cls
        return cls

    return add


def make_norm(kind: str, dim: int, layout: str) -> nn.Module:
    """"ln" or "bn" for this layout (see the module docstring)."""
    if kind == "ln":
        return nn.GroupNorm(1, dim) if layout == "conv" else nn.LayerNorm(dim)
    if kind == "bn" and layout == "conv":
        return nn.BatchNorm2d(dim)
    raise ConfigError(f"norm {kind!r} is not defined for layout {layout!r}; allowed: ln, bn (conv only)")


def pool_for_gate(t: torch.Tensor, layout: str) -> torch.Tensor:
    """(N, C, H, W) -> (N, C) by spatial mean; (N, T, D) stays per token."""
    return t.mean(dim=(2, 3)) if layout == "conv" else t


def expand_gate(g: torch.Tensor, layout: str) -> torch.Tensor:
    """A gate computed on pooled features, reshaped to broadcast against (N, C, H, W) or (N, T, D)."""
    return g[:, :, None, None] if layout == "conv" else g


def in_float32(inputs: tuple[torch.Tensor, ...], gate) -> torch.Tensor:
    """`gate(*inputs)` in float32 even under bf16 autocast. A gate is a sigmoid of a learned logit:
    in bf16 it reaches exactly 1.0 from a logit near 6 (float32: near 17), which zeroes gamma =
    (1-a)(1-b) and the gate's gradient, and its value at initialisation is off by several percent.
    The gates are a few small matmuls, so float32 costs little."""
    with torch.autocast(inputs[0].device.type, enabled=False):
        return gate(*(t.float() for t in inputs))


def broadcast_vector(v: torch.Tensor, layout: str) -> torch.Tensor:
    """A per-channel / per-feature parameter vector shaped to broadcast against the layout."""
    return v[None, :, None, None] if layout == "conv" else v


class Residual(nn.Module):
    """Base class: `params` (from catalog.VARIANTS, set by `register`) are the variant's arguments
    (the config's `args`) with their defaults: `build` passes every argument, so constructors
    declare none."""

    name = "?"
    params: dict[str, Param] = {}

    def __init__(self, dim: int, layout: str):
        super().__init__()
        if layout not in LAYOUTS:
            raise ConfigError(f"layout {layout!r} unknown; allowed: {', '.join(LAYOUTS)}")
        self.dim, self.layout = dim, layout

    def forward(self, x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError


@register("plain")
class Plain(Residual):
    """y = F: no skip at all (paper 002's plain net)."""

    def forward(self, x, f):
        return f


@register("add")
class Add(Residual):
    """y = x + F (He et al. 2016a/b); the CIFAR baseline and paper 001's 1xSkip."""

    def forward(self, x, f):
        return x + f


@register("xskip")
class XSkip(Residual):
    """y = lam*x + F, paper 001 Eq. (2); lam < 1 is the contracted skip of its Table 3."""

    def __init__(self, dim, layout, lam):
        super().__init__(dim, layout)
        self.lam = lam

    def forward(self, x, f):
        return self.lam * x + f


class _NormedXSkip(Residual):
    """y = N(lam*x + F), paper 001 Eq. (3) (LN) and its Table 4 (BN)."""

    norm_kind = "ln"

    def __init__(self, dim, layout, lam):
        super().__init__(dim, layout)
        self.lam = lam
        self.norm = make_norm(self.norm_kind, dim, layout)

    def forward(self, x, f):
        return self.norm(self.lam * x + f)


@register("xskip_ln")
class XSkipLN(_NormedXSkip):
    __doc__ = _NormedXSkip.__doc__
    norm_kind = "ln"


@register("xskip_bn")
class XSkipBN(_NormedXSkip):
    __doc__ = _NormedXSkip.__doc__
    norm_kind = "bn"


@register("scale_f")
class ScaleF(Residual):
    """y = x + k*F: the expanded-branch rows of paper 001 Table 3 without a norm."""

    def __init__(self, dim, layout, k):
        super().__init__(dim, layout)
        self.k = k

    def forward(self, x, f):
        return x + self.k * f


@register("ln_scale_f")
class LNScaleF(Residual):
    """y = LN(x + k*F): paper 001 Table 3, "LN(x + 2*F)" and "LN(x + 3*F)"."""

    def __init__(self, dim, layout, k):
        super().__init__(dim, layout)
        self.k = k
        self.norm = make_norm("ln", dim, layout)

    def forward(self, x, f):
        return self.norm(x + self.k * f)


class _RecursiveSkip(Residual):
    """Paper 001 Eq. (4): y_1 = N(x + F), y_i = N(x + y_{i-1}) for i = 2..lam, each N its own norm.

    "lambda should be an integer no smaller than one"; lam = 1 is the Transformer's post-LN
    block LN(x + F). Each step has its own affine parameters (w_i, b_i of Appendix A), which is
    what lets the inner gain act as a learned skip ratio.
    """

    norm_kind = "ln"

    def __init__(self, dim, layout, lam):
        super().__init__(dim, layout)
        self.norms = nn.ModuleList(make_norm(self.norm_kind, dim, layout) for _ in range(lam))

    def forward(self, x, f):
        y = f
        for norm in self.norms:
            y = norm(x + y)
        return y


@register("rskip_ln")
class RSkipLN(_RecursiveSkip):
    __doc__ = _RecursiveSkip.__doc__
    norm_kind = "ln"


@register("rskip_bn")
class RSkipBN(_RecursiveSkip):
    __doc__ = _RecursiveSkip.__doc__
    norm_kind = "bn"


@register("wskip_ln")
class WSkipLN(Residual):
    """y = LN(w*x + F) with w a learned vector, one entry per channel/feature (paper 001, "Learning
    lambda": "a sampled w in R^32 at middle layers"), initialised to `init` (1 or 2 in the paper)."""

    def __init__(self, dim, layout, init):
        super().__init__(dim, layout)
        self.w = nn.Parameter(torch.full((dim,), float(init)))
        self.norm = make_norm("ln", dim, layout)

    def forward(self, x, f):
        return self.norm(broadcast_vector(self.w, self.layout) * x + f)


class ScalingGate(nn.Module):
    """Paper 000 Eq. (2): S(x, F) = Tanh([x; F] W_f + b_f) W_ff + b_ff, then a sigmoid.

    `hidden=False` is Table 6's single-layer gate S = [x; F] W_f + b_f (2h+1 parameters).
    `bias` initialises the last bias: Sec. 4.2 sets it to 3 for alpha and -3 for beta on CIFAR
    so that training starts close to x + small*F. Output: one value per example (conv) or token (seq),
    in float32 under autocast too (`in_float32`).
    """

    def __init__(self, dim: int, layout: str, hidden: bool, bias: float):
        super().__init__()
        self.layout = layout
        if hidden:
            self.net = nn.Sequential(nn.Linear(2 * dim, dim), nn.Tanh(), nn.Linear(dim, 1))
        else:
            self.net = nn.Sequential(nn.Linear(2 * dim, 1))
        nn.init.constant_(self.net[-1].bias, bias)

    def forward(self, x, f):
        return in_float32((x, f), lambda x, f: self.from_pooled(pool_for_gate(x, self.layout), pool_for_gate(f, self.layout)))

    def from_pooled(self, px, pf):
        """The gate from x and F already pooled (SAS pools once for all its gates)."""
        return expand_gate(torch.sigmoid(self.net(torch.cat([px, pf], dim=-1))), self.layout)


class TransformGate(nn.Linear):
    """Highway's transform gate (Srivastava et al. 2015): T(x) = sigmoid(x W^T + b), from x alone,
    h*h + h parameters, one value per channel (conv: from the spatially pooled x) or feature (seq).
    `bias` initialises b. Used by `highway`, and by `sas` with `gate: transform`, where paper 000
    Table 6 applies it "to predict the scaling factors"."""

    def __init__(self, dim: int, layout: str, bias: float):
        super().__init__(dim, dim)
        self.layout = layout
        nn.init.constant_(self.bias, bias)

    def forward(self, x, f=None):  # f unused: the same call as ScalingGate
        return in_float32((x,), lambda x: self.from_pooled(pool_for_gate(x, self.layout)))

    def from_pooled(self, px, pf=None):
        return expand_gate(torch.sigmoid(super().forward(px)), self.layout)


def sas_formula(x, f, a, b, gamma, norm: nn.Module):
    """Paper 000 Eq. (3): y = a*x + b*F + gamma*N(x + F); Eq. (4) ties gamma = (1-a)(1-b).
    As two fused multiply-adds over gamma*N(x + F): two passes over the activations fewer."""
    return torch.addcmul(torch.addcmul(gamma * norm(x + f), a, x), b, f)


@register("sas")
class SAS(Residual):
    """Self-Adaptive Scaling, paper 000 Eq. (4): y = a*x + b*F + (1-a)(1-b)*N(x + F).

    a and b come from two scaling gates with their own parameters ("alpha, beta and gamma can be
    predicted by scaling gates with different parameters"). `gamma: free` adds a third gate
    instead of tying gamma (the footnote's ablation, 93.95 vs 94.05); its default bias -3 makes
    gamma start near the tied value (1-s(3))(1-s(-3)) ~ 0.045. `norm: bn` is Table 7's BN row.
    `gate` chooses what predicts a and b (Table 6): `full`, the paper's Scaling Gate (Eq. 2);
    `single`, its single-layer form; `transform`, Highway's Transform Gate T(x) from x alone,
    per channel (h*h + h parameters each). The last gates are kept in `last_gates` (detached, float32)
    for the analysis of Fig. 3.
    """

    def __init__(self, dim, layout, norm, gate, gamma, bias_a, bias_b, bias_gamma):
        super().__init__(dim, layout)

        def make_gate(bias):
            return TransformGate(dim, layout, bias) if gate == "transform" else ScalingGate(dim, layout, gate == "full", bias)

        self.gate_a, self.gate_b = make_gate(bias_a), make_gate(bias_b)
        self.gate_gamma = make_gate(bias_gamma) if gamma == "free" else None
        self.norm = make_norm(norm, dim, layout)
        self.last_gates: dict[str, torch.Tensor] = {}

    def gates(self, x, f):
        a, b, gamma = in_float32((x, f), self._gates)
        return a, b, gamma if gamma is not None else (1 - a) * (1 - b)

    def _gates(self, x, f):
        # x and F pooled once for every gate (on conv maps each pooling reads the whole activation)
        px, pf = pool_for_gate(x, self.layout), pool_for_gate(f, self.layout)
        gamma = self.gate_gamma.from_pooled(px, pf) if self.gate_gamma is not None else None
        return self.gate_a.from_pooled(px, pf), self.gate_b.from_pooled(px, pf), gamma

    def forward(self, x, f):
        a, b, gamma = self.gates(x, f)
        self.last_gates = {"a": a.detach(), "b": b.detach(), "gamma": gamma.detach()}
        return sas_formula(x, f, a, b, gamma, self.norm)


@register("highway")
class Highway(Residual):
    """Highway connection (Srivastava et al. 2015) as paper 000 Table 6 uses it: a transform gate
    from x only, T(x) = sigmoid(x W^T + b) with h*h + h parameters, and y = T*F + (1-T)*x.

    T is per channel (conv: from the spatially pooled x) or per feature (seq). `bias` starts
    negative, "to attach more importance to the skip connection for initialization" (Sec. 4.2).
    """

    def __init__(self, dim, layout, bias):
        super().__init__(dim, layout)
        self.transform = TransformGate(dim, layout, bias)

    def forward(self, x, f):
        t = self.transform(x)
        return t * f + (1 - t) * x


def build(name: str, dim: int, layout: str, args: dict | None = None) -> Residual:
    return REGISTRY[name](dim, layout, **validate(name, args))

