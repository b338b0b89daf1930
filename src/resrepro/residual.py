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

The designs that came after the papers (issue 16: Pre-LN, ReZero, SkipInit, LayerScale, DeepNorm,
Admin) need what only the model knows. A model that supports them (catalog: `places_residuals`)
tells each residual its `Place` (stack and depth) and applies three optional hooks, which every
other variant leaves alone:
- `branch_input(x)`: what the branch reads (Pre-LN: LN(x)); the identity otherwise;
- `init_branch(weights)`: the branch's value-path weights at initialisation (DeepNorm scales them);
- `final_norm`: the model ends each stack with a norm (Pre-LN Transformers).
`initialize(model, forward)` runs the one data-dependent initialisation (Admin's profile).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from .catalog import PLACED_VARIANTS, VARIANTS, ConfigError, Param, validate, variant_id  # noqa: F401  (the registry's checks)

LAYOUTS = ("conv", "seq")

REGISTRY: dict[str, type["Residual"]] = {}


def register(name: str):
    """The class of a variant declared in catalog.VARIANTS, which gives it its arguments."""

    def add(cls):
        if name not in VARIANTS:
            raise ValueError(f"variant {name!r}: declare its arguments in catalog.VARIANTS first")
        cls.name, cls.params, cls.placed = name, VARIANTS[name], name in PLACED_VARIANTS
        REGISTRY[name] = cls
        return cls

    return add


def register_external(name: str, params: dict[str, Param]):
    """Declare and register a variant from a file outside the package (plugins.py): its arguments
    (catalog.Param each) join catalog.VARIANTS, its class the registry. A name the package already
    has is refused."""
    if name in VARIANTS:
        raise ValueError(f"variant {name!r} exists already; choose another name")
    if not isinstance(params, dict) or not all(isinstance(p, Param) for p in params.values()):
        raise TypeError(f"variant {name!r}: params must map each argument to a catalog.Param")
    VARIANTS[name] = dict(params)
    return register(name)


def make_norm(kind: str, dim: int, layout: str) -> nn.Module:
    """"ln" or "bn" for this layout (see the module docstring)."""
    if kind == "ln":
        return nn.GroupNorm(1, dim) if layout == "conv" else nn.LayerNorm(dim)
    if kind == "bn" and layout == "conv":
        return nn.BatchNorm2d(dim)
    raise ConfigError(f"norm {kind!r} is not defined for layout {layout!r}; allowed: ln, bn (conv only)")


def pool_for_gate(t: torch.Tensor, layout: str) -> torch.Tensor:
    """(N, C, H, W) -> (N, C) by spatial mean; (N, T, D) stays per token. The mean as a sum divided
    after: the same values, and its backward divides the (N, C) gradient before broadcasting it,
    where `mean`'s divides the whole (N, C, H, W) map (a pass over the activation per gate input)."""
    return t.sum(dim=(2, 3)) / (t.shape[2] * t.shape[3]) if layout == "conv" else t


def expand_gate(g: torch.Tensor, layout: str) -> torch.Tensor:
    """A gate computed on pooled features, reshaped to broadcast against (N, C, H, W) or (N, T, D)."""
    return g[:, :, None, None] if layout == "conv" else g


def in_float32(inputs: tuple[torch.Tensor, ...], gate) -> torch.Tensor:
    """`gate(*inputs)` in float32 even under bf16 autocast. A gate is a sigmoid of a learned logit:
    in bf16 it reaches exactly 1.0 from a logit near 6 (float32: near 17), which zeroes gamma =
    (1-a)(1-b) and the gate's gradient, and its value at initialisation is off by several percent.
    The gates are a few small matmuls, so float32 costs little. A float64 run's gates stay float64."""
    with torch.autocast(inputs[0].device.type, enabled=False):
        return gate(*(t if t.dtype == torch.float64 else t.float() for t in inputs))


def broadcast_vector(v: torch.Tensor, layout: str) -> torch.Tensor:
    """A per-channel / per-feature parameter vector shaped to broadcast against the layout."""
    return v[None, :, None, None] if layout == "conv" else v


@dataclass(frozen=True)
class Place:
    """Where a residual sits, as its model tells it: its stack ("encoder", "decoder", or "net" for
    a single stack such as a ResNet's), the layers of every stack of the model (a Transformer layer
    counts once, as Wang et al. 2022 count N and M; a ResNet block counts once), and the residual
    branches of the whole model (De and Smith 2020's d). `input_dim`: the width the branch reads,
    where it differs from the residual's own (the first block of a ResNet stage)."""

    stack: str
    layers: tuple[tuple[str, int], ...]
    branches: int
    input_dim: int | None = None

    def depth(self, stack: str | None = None) -> int:
        return dict(self.layers)[stack or self.stack]


class Residual(nn.Module):
    """Base class: `params` (from catalog.VARIANTS, set by `register`) are the variant's arguments
    (the config's `args`) with their defaults: `build` passes every argument, so constructors
    declare none. A `placed` variant (catalog.PLACED_VARIANTS) also takes its `place`."""

    name = "?"
    params: dict[str, Param] = {}
    placed = False
    final_norm = False  # the model ends each stack with a norm of this layout (Pre-LN)
    profiles = False  # initialised from one forward pass (`initialize`)

    def __init__(self, dim: int, layout: str):
        super().__init__()
        if layout not in LAYOUTS:
            raise ConfigError(f"layout {layout!r} unknown; allowed: {', '.join(LAYOUTS)}")
        self.dim, self.layout = dim, layout

    def forward(self, x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def branch_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the branch F reads: x itself, for every variant but Pre-LN."""
        return x

    def init_branch(self, weights: list[torch.Tensor]) -> None:
        """Called once by the model with the branch's value-path weights (attention's value and
        output projections, the FFN's two layers, a block's convolutions); nothing by default."""


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
    for the analysis of Fig. 3, by an uncompiled forward.
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
        if not torch.compiler.is_compiling():  # a compiled step has no reader; and stacked runs' gates could not leave it
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


# ---- Beyond the papers (issue 16): the residual designs that came after them -----------------


@register("pre_ln")
class PreLN(Residual):
    """y = x + F(LN(x)): the norm moves onto the branch's input (Xiong et al. 2020, "On Layer
    Normalization in the Transformer Architecture"; the tensor2tensor v2 default). The stream itself
    is never normalised, so the model ends each stack with a LayerNorm (`final_norm`), as Xiong et
    al.'s Pre-LN Transformer does."""

    final_norm = True

    def __init__(self, dim, layout, place):
        super().__init__(dim, layout)
        self.norm = make_norm("ln", place.input_dim or dim, layout)

    def branch_input(self, x):
        return self.norm(x)

    def forward(self, x, f):
        return x + f


class _ScaledBranch(Residual):
    """y = x + a*F with one learned scalar a per residual (`_init_scale` sets its initial value)."""

    def _init_scale(self, value: float) -> None:
        self.scale = nn.Parameter(torch.tensor(float(value)))

    def forward(self, x, f):
        return x + self.scale * f


@register("rezero")
class ReZero(_ScaledBranch):
    """y = x + a*F, a a learned scalar initialised at 0 (Bachlechner et al. 2021, "ReZero is All You
    Need"): every block is the identity at initialisation. The branch keeps the model's own norms."""

    def __init__(self, dim, layout):
        super().__init__(dim, layout)
        self._init_scale(0.0)


@register("skipinit")
class SkipInit(_ScaledBranch):
    """y = x + a*F, a a learned scalar initialised at `init`, by default 1/sqrt(d) with d the
    model's residual branches (De and Smith 2020, "Batch Normalization Biases Residual Blocks
    Towards the Identity Function in Deep Networks": "initialized to zero or a small constant
    <= 1/sqrt(d)"; zero is ReZero's row)."""

    def __init__(self, dim, layout, place, init):
        super().__init__(dim, layout)
        self._init_scale(1.0 / math.sqrt(place.branches) if init is None else init)


def layerscale_init(depth: int) -> float:
    """CaiT's initial diagonal (Touvron et al. 2021, Sec. 2.1): 0.1 up to depth 18, 1e-5 up to 24,
    1e-6 deeper."""
    return 0.1 if depth <= 18 else 1e-5 if depth <= 24 else 1e-6


@register("layerscale")
class LayerScale(Residual):
    """y = x + diag(l)*F, l a learned vector (one entry per channel/feature) initialised at `init`,
    by default CaiT's value for the depth of its stack (`layerscale_init`; Touvron et al. 2021,
    "Going deeper with Image Transformers")."""

    def __init__(self, dim, layout, place, init):
        super().__init__(dim, layout)
        self.diag = nn.Parameter(torch.full((dim,), layerscale_init(place.depth()) if init is None else init))

    def forward(self, x, f):
        return x + broadcast_vector(self.diag, self.layout) * f


def deepnorm_constants(place: Place) -> tuple[float, float]:
    """DeepNorm's (alpha, beta) from the model's depth (Wang et al. 2022, "DeepNet", Fig. 2 and
    Table 1). An encoder-decoder of N + M layers: encoder alpha = 0.81 (N^4 M)^(1/16), beta = 0.87
    (N^4 M)^(-1/16); decoder alpha = (3M)^(1/4), beta = (12M)^(-1/4). One stack of N layers of two
    residual sublayers: alpha = (2N)^(1/4), beta = (8N)^(-1/4); a ResNet block is one residual
    sublayer, so L blocks give alpha = L^(1/4), beta = (4L)^(-1/4) (our reading for ResNets, which
    the paper does not cover)."""
    layers = dict(place.layers)
    if place.stack in ("encoder", "decoder") and set(layers) == {"encoder", "decoder"}:
        n, m = layers["encoder"], layers["decoder"]
        if place.stack == "encoder":
            return 0.81 * (n**4 * m) ** (1 / 16), 0.87 * (n**4 * m) ** (-1 / 16)
        return (3 * m) ** 0.25, (12 * m) ** -0.25
    sublayers = place.depth()  # a ResNet block: one residual sublayer
    return sublayers**0.25, (4 * sublayers) ** -0.25


@register("deepnorm")
class DeepNorm(Residual):
    """y = LN(alpha*x + F), and the branch's value-path weights scaled by beta at initialisation
    (Wang et al. 2022): alpha and beta from the model's depth (`deepnorm_constants`). In a
    Transformer ("seq") they are drawn again from Xavier-normal with gain beta, as the paper's
    pseudocode does for the FFN and the value and output projections (its queries and keys, gain
    1, keep the model's own draw). A ResNet's convolutions, which the paper does not cover, keep
    their He draw times beta."""

    def __init__(self, dim, layout, place):
        super().__init__(dim, layout)
        self.alpha, self.beta = deepnorm_constants(place)
        self.norm = make_norm("ln", dim, layout)

    def init_branch(self, weights):
        with torch.no_grad():
            for w in weights:
                if self.layout == "seq":
                    nn.init.xavier_normal_(w, gain=self.beta)
                else:  # conv: He's draw, scaled
                    w.mul_(self.beta)

    def forward(self, x, f):
        return self.norm(self.alpha * x + f)


@register("admin")
class Admin(Residual):
    """y = LN(w*x + F), w a learned vector initialised from the output-variance profile (Liu et al.
    2020, "Understanding the Difficulty of Training Transformers", Admin). One forward pass at
    initialisation (`initialize`) walks each stack in order: the first residual's w is 1, and each
    next one's is sqrt(Var[w_i x_i] + Var[F_i]) of the one before, so w_i^2 grows as the variance its
    skip has accumulated (the authors' profiling code, Transformer-Clinic, does the same per stack)."""

    profiles = True

    def __init__(self, dim, layout, place):
        super().__init__(dim, layout)
        self.stack = place.stack
        self.w = nn.Parameter(torch.ones(dim))
        self.norm = make_norm("ln", dim, layout)
        self.profile: dict | None = None  # the running ratio of each stack, during `initialize` only

    def forward(self, x, f):
        if self.profile is not None:
            self.w.data.fill_(self.profile.get(self.stack, 1.0))
        y = broadcast_vector(self.w, self.layout) * x
        if self.profile is not None:
            self.profile[self.stack] = math.sqrt(y.float().var().item() + f.float().var().item())
        return self.norm(y + f)


def initialize(model: nn.Module, forward: Callable[[], object]) -> bool:
    """The data-dependent initialisation of the variants that need one (`profiles`: Admin): calls
    `forward()` (one training batch through the model) once, in training mode and without
    gradients. Every buffer (BN's running statistics) is put back afterwards, so the profiled
    weights are all that changes. Returns whether there was anything to initialise."""
    profiled = [m for m in model.modules() if isinstance(m, Residual) and m.profiles]
    if not profiled:
        return False
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    was_training, streams = model.training, {}
    for m in profiled:
        m.profile = streams
    try:
        model.train()
        with torch.no_grad():
            forward()
    finally:
        for m in profiled:
            m.profile = None
        model.train(was_training)
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
    return True


def build(name: str, dim: int, layout: str, args: dict | None = None, place: Place | None = None) -> Residual:
    """The variant's module; a placed variant (catalog.PLACED_VARIANTS) needs the model's `place`."""
    cls, kwargs = REGISTRY[name], validate(name, args)
    if not cls.placed:
        return cls(dim, layout, **kwargs)
    if place is None:
        raise ConfigError(f"variant {name!r} needs its model's depth and hooks (a Place); this model does not supply them")
    return cls(dim, layout, place=place, **kwargs)

