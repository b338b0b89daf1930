"""The residual registry: every variant's formula checked against values computed by hand.

Papers: 000 = SAS (Eq. 2-4, Tables 1-2, 6-7), 001 = xSkip/rSkip (Eq. 2-4, Appendix A Eq. 5-6).
Layouts: "conv" is (N, C, H, W), "seq" is (N, T, D). LN on conv is GroupNorm with one group
(mean/var over (C, H, W) per example); LN on seq is LayerNorm over D. BN is conv only.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from resrepro import residual
from resrepro.residual import ConfigError, build, sas_formula, validate, variant_id

TABLES = Path(__file__).resolve().parents[1] / "config" / "tables"
EPS = 1e-5  # torch's LayerNorm / GroupNorm / BatchNorm default
DIM = 4
SHAPES = {"conv": (2, DIM, 3, 3), "seq": (2, 3, DIM)}
PLACE = residual.Place("net", (("net", 9),), 9)  # a ResNet of 9 blocks: what a placed variant is told


# --------------------------------------------------------------------------- helpers


def pair(layout: str, scale: float = 1.0, seed: int = 0, dtype=torch.float32):
    """A skip x and a branch output f of the layout's shape (independent, non-trivial)."""
    g = torch.Generator().manual_seed(seed)
    shape = SHAPES[layout]
    x = scale * torch.randn(shape, generator=g, dtype=dtype) + 0.3
    f = scale * torch.randn(shape, generator=g, dtype=dtype) - 0.2
    return x, f


def ln_ref(t: torch.Tensor, layout: str) -> torch.Tensor:
    """Layer norm by hand, affine = identity: seq over the last dim, conv over (C, H, W) per example."""
    dims = (-1,) if layout == "seq" else (1, 2, 3)
    mu = t.mean(dim=dims, keepdim=True)
    var = ((t - mu) ** 2).mean(dim=dims, keepdim=True)  # biased variance
    return (t - mu) / torch.sqrt(var + EPS)


def bn_ref(t: torch.Tensor) -> torch.Tensor:
    """Batch norm by hand (train mode, affine = identity): per channel over (N, H, W)."""
    mu = t.mean(dim=(0, 2, 3), keepdim=True)
    var = ((t - mu) ** 2).mean(dim=(0, 2, 3), keepdim=True)
    return (t - mu) / torch.sqrt(var + EPS)


def per_channel(v: torch.Tensor, layout: str) -> torch.Tensor:
    return v[None, :, None, None] if layout == "conv" else v


def randomize_affine(norm: nn.Module, seed: int) -> None:
    """Give a norm non-trivial gains (kept away from 0) and biases."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        n = norm.weight.numel()
        sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
        norm.weight.copy_(sign * (0.5 + torch.rand(n, generator=g)))
        norm.bias.copy_(torch.randn(n, generator=g))


def close(a, b, tol=1e-5):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def table_rows():
    from resrepro.experiments import load_tables

    return [row for table in load_tables(TABLES).values() for row in table["rows"]]


# --------------------------------------------------------------------------- every variant


def _cases():
    for name in sorted(residual.REGISTRY):
        for layout in residual.LAYOUTS:
            if name.endswith("_bn") and layout == "seq":
                continue
            yield pytest.param(name, layout, id=f"{name}-{layout}")


@pytest.mark.parametrize("name,layout", list(_cases()))
def test_every_variant_keeps_shape_and_passes_gradient(name, layout):
    """Every registry variant maps (x, F) to a finite tensor of x's shape and trains: gradient
    reaches x (all but `plain`, which drops the skip), F and every parameter of the module."""
    torch.manual_seed(0)
    m = build(name, DIM, layout, place=PLACE if residual.REGISTRY[name].placed else None)
    m.train()
    x, f = pair(layout)
    x.requires_grad_(True)
    f.requires_grad_(True)
    reads_x = type(m).branch_input is not residual.Residual.branch_input  # Pre-LN: its norm is on the branch's input
    y = m(x, f + m.branch_input(x) if reads_x else f)
    assert y.shape == x.shape
    assert torch.isfinite(y).all()
    # A random projection: with a plain sum, the gradient through a norm would vanish.
    r = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    (y * r).sum().backward()
    if name == "rezero":  # the identity at initialisation: F's gradient is zero until a moves
        assert f.grad is not None and f.grad.abs().sum() == 0
    else:
        assert f.grad is not None and f.grad.abs().sum() > 0
    if name == "plain":
        assert x.grad is None
    else:
        assert x.grad is not None and x.grad.abs().sum() > 0
    for pname, p in m.named_parameters():
        assert p.grad is not None, f"{name}: no gradient for {pname}"
        assert p.grad.abs().sum() > 0, f"{name}: zero gradient for {pname}"
        assert torch.isfinite(p.grad).all()


@pytest.mark.parametrize("name", ["xskip_bn", "rskip_bn"])
def test_bn_variants_reject_seq_layout(name):
    """BN is defined for conv nets only (paper 001 Table 4 is CIFAR); asking for it on a sequence
    fails as a config error."""
    with pytest.raises(ConfigError, match="bn"):
        build(name, DIM, "seq")
    with pytest.raises(ConfigError):
        build("sas", DIM, "seq", {"norm": "bn"})


def test_unknown_layout_is_config_error():
    """Only the two layouts exist."""
    with pytest.raises(ConfigError, match="conv"):
        build("add", DIM, "image")


# --------------------------------------------------------------------------- formulas


@pytest.mark.parametrize("layout", residual.LAYOUTS)
def test_plain_add_xskip_scale_f(layout):
    """plain = F (paper 002); add = x + F; xskip = lam*x + F (001 Eq. 2, lam 0.5 of Table 3 and 3 of
    Table 1); scale_f(k) = x + k*F (001 Table 3)."""
    x, f = pair(layout)
    assert torch.equal(build("plain", DIM, layout)(x, f), f)
    close(build("add", DIM, layout)(x, f), x + f)
    for lam in (0.5, 3):
        close(build("xskip", DIM, layout, {"lam": lam})(x, f), lam * x + f)
    close(build("scale_f", DIM, layout, {"k": 2})(x, f), x + 2 * f)


@pytest.mark.parametrize("layout", residual.LAYOUTS)
def test_xskip_ln_is_layer_norm_of_expanded_skip(layout):
    """xskip_ln(2) = LN(2x + F) (001 Eq. 3); LN by hand over features (seq) or over (C, H, W) per
    example (conv), eps 1e-5, identity affine at init."""
    x, f = pair(layout, scale=2.0)
    y = build("xskip_ln", DIM, layout, {"lam": 2})(x, f)
    close(y, ln_ref(2 * x + f, layout))
    # and it is not the per-channel norm: on conv, channel means of y are not all 0
    if layout == "conv":
        assert y.mean(dim=(0, 2, 3)).abs().max() > 1e-3


def test_xskip_bn_normalizes_per_channel_in_train_mode():
    """xskip_bn(lam) = BN(lam*x + F) (001 Table 4): in train mode, per channel over (N, H, W)."""
    x, f = pair("conv", scale=2.0)
    m = build("xskip_bn", DIM, "conv", {"lam": 3})
    m.train()
    close(m(x, f), bn_ref(3 * x + f))


@pytest.mark.parametrize("layout", residual.LAYOUTS)
def test_ln_scale_f(layout):
    """ln_scale_f(3) = LN(x + 3F), the "LN(x + 3*F)" row of paper 001 Table 3."""
    x, f = pair(layout)
    close(build("ln_scale_f", DIM, layout, {"k": 3})(x, f), ln_ref(x + 3 * f, layout))


@pytest.mark.parametrize("layout", residual.LAYOUTS)
def test_rskip_ln_1_equals_xskip_ln_1(layout):
    """Paper 001: "1rSkip+LN is equivalent to 1xSkip+LN" (both LN(x + F)), exactly, also with
    the same random affine parameters on both norms."""
    x, f = pair(layout)
    r = build("rskip_ln", DIM, layout, {"lam": 1})
    s = build("xskip_ln", DIM, layout, {"lam": 1})
    assert len(r.norms) == 1
    assert torch.equal(r(x, f), s(x, f))
    randomize_affine(r.norms[0], seed=3)
    s.norm.load_state_dict(r.norms[0].state_dict())
    assert torch.equal(r(x, f), s(x, f))
    # the affine really changed the output (the check above is not trivially at init)
    assert not torch.allclose(r(x, f), ln_ref(x + f, layout), atol=1e-3)


def test_rskip_ln_3_unrolls_to_three_layer_norms():
    """rskip_ln(3) = LN3(x + LN2(x + LN1(x + F))) (001 Eq. 4), each step its own norm, applied in
    order: recomputed with three separate torch LayerNorms carrying the module's parameters."""
    x, f = pair("seq")
    m = build("rskip_ln", DIM, "seq", {"lam": 3})
    assert len(m.norms) == 3
    lns = []
    for i, norm in enumerate(m.norms):
        randomize_affine(norm, seed=10 + i)
        ln = nn.LayerNorm(DIM, eps=EPS)
        ln.load_state_dict(norm.state_dict())
        lns.append(ln)
    with torch.no_grad():
        expected = lns[2](x + lns[1](x + lns[0](x + f)))
        close(m(x, f), expected)
        # the order matters: applying the norms the other way round gives something else
        reversed_ = lns[0](x + lns[1](x + lns[2](x + f)))
        assert not torch.allclose(m(x, f), reversed_, atol=1e-3)


def test_rskip_bn_2_unrolls_to_two_batch_norms():
    """rskip_bn(2) = BN(x + BN(x + F)) (001 Table 4), per channel over (N, H, W) in train mode."""
    x, f = pair("conv")
    m = build("rskip_bn", DIM, "conv", {"lam": 2})
    m.train()
    close(m(x, f), bn_ref(x + bn_ref(x + f)))


def test_rskip_ln_2_appendix_a_ratio():
    """Paper 001 Appendix A: y2 = LN(x + LN(x + F)) = A*x + B*F + C (Eq. 5) with
    A = w2/s2 + w2*w1/(s2*s1), B = w2*w1/(s2*s1), C = w2*(b1 - w1*mu1/s1 - mu2)/s2 + b2,
    so the skip/residual ratio A/B = s1/w1 + 1 (Eq. 6)."""
    m = build("rskip_ln", DIM, "seq", {"lam": 2}).double()
    randomize_affine(m.norms[0], seed=21)
    randomize_affine(m.norms[1], seed=22)
    w1, b1 = m.norms[0].weight.detach(), m.norms[0].bias.detach()
    w2, b2 = m.norms[1].weight.detach(), m.norms[1].bias.detach()
    x, f = pair("seq", scale=1.5, dtype=torch.float64)

    def stats(t):  # per token: mean and sigma = sqrt(biased var + eps)
        mu = t.mean(dim=-1, keepdim=True)
        return mu, torch.sqrt(((t - mu) ** 2).mean(dim=-1, keepdim=True) + EPS)

    mu1, s1 = stats(x + f)
    y1 = w1 * (x + f - mu1) / s1 + b1
    mu2, s2 = stats(x + y1)
    A = w2 / s2 + w2 * w1 / (s2 * s1)
    B = w2 * w1 / (s2 * s1)
    C = w2 * (b1 - w1 * mu1 / s1 - mu2) / s2 + b2
    with torch.no_grad():
        y2 = m(x, f)
    close(y2, A * x + B * f + C, tol=1e-10)  # Eq. 5
    close(A / B, s1 / w1 + 1, tol=1e-10)  # Eq. 6
    # the ratio is data-dependent and learned: it differs across tokens and features
    assert (A / B).std() > 1e-2


@pytest.mark.parametrize("layout", residual.LAYOUTS)
def test_highway_with_zero_weight_is_bias_gated_mix(layout):
    """Highway (000 Table 6): T(x) = sigmoid(x W^T + b) from x only; with W = 0, T = s(b) per
    channel/feature and y = s(b)*F + (1 - s(b))*x."""
    x, f = pair(layout)
    m = build("highway", DIM, layout)
    assert torch.all(m.transform.bias == -3.0)  # Sec. 4.2: start close to the skip
    b = torch.tensor([-2.0, -0.5, 0.0, 1.5])
    with torch.no_grad():
        m.transform.weight.zero_()
        m.transform.bias.copy_(b)
    t = per_channel(torch.sigmoid(b), layout)
    close(m(x, f), t * f + (1 - t) * x)


@pytest.mark.parametrize("layout", residual.LAYOUTS)
def test_wskip_ln_learned_vector(layout):
    """wskip_ln(init=2) = LN(w*x + F) with w one learned entry per channel/feature, all 2 at init
    (001 "Learning lambda"); with another w, each channel's skip is scaled by its own entry."""
    x, f = pair(layout)
    m = build("wskip_ln", DIM, layout, {"init": 2})
    assert isinstance(m.w, nn.Parameter) and m.w.shape == (DIM,)
    assert torch.all(m.w == 2.0)
    close(m(x, f), ln_ref(2 * x + f, layout))
    w = torch.tensor([0.5, 1.0, 2.0, 3.0])
    with torch.no_grad():
        m.w.copy_(w)
    close(m(x, f), ln_ref(per_channel(w, layout) * x + f, layout))


# --------------------------------------------------------------------------- SAS (paper 000)


def _fixed_gates(a, b, g):
    def gates(x, f):
        return torch.tensor(a), torch.tensor(b), torch.tensor(g)

    return gates


TABLE1 = [  # (alpha, beta, gamma) -> expected y, paper 000 Table 1 (formula (3))
    pytest.param(0.0, 0.0, 1.0, lambda x, f, ln: ln, id="1-LN(x+F)"),
    pytest.param(1.0, 1.0, 0.0, lambda x, f, ln: x + f, id="2-x+F"),
    pytest.param(1.0, 0.3, 0.0, lambda x, f, ln: x + 0.3 * f, id="3-x+beta*F"),
    pytest.param(0.7, 1.0, 0.0, lambda x, f, ln: 0.7 * x + f, id="4-alpha*x+F"),
]


@pytest.mark.parametrize("layout", residual.LAYOUTS)
@pytest.mark.parametrize("a,b,g,expected", TABLE1)
def test_sas_table1_special_cases(monkeypatch, layout, a, b, g, expected):
    """Paper 000 Table 1: y = a*x + b*F + g*LN(x + F) (Eq. 3) with the gates forced to each row's
    values gives LN(x+F), x+F, x+beta*F and alpha*x+F."""
    x, f = pair(layout)
    m = build("sas", DIM, layout)
    monkeypatch.setattr(m, "gates", _fixed_gates(a, b, g))
    close(m(x, f), expected(x, f, ln_ref(x + f, layout)))


TABLE2 = [  # (alpha, beta) -> expected y with gamma tied to (1-a)(1-b), paper 000 Table 2 (formula (4))
    pytest.param(0.0, 0.0, lambda x, f, ln: ln, id="1-LN(x+F)"),
    pytest.param(0.0, 1.0, lambda x, f, ln: f, id="2-F"),
    pytest.param(1.0, 0.0, lambda x, f, ln: x, id="3-x"),
    pytest.param(1.0, 1.0, lambda x, f, ln: x + f, id="4-x+F"),
    pytest.param(1.0, 0.3, lambda x, f, ln: x + 0.3 * f, id="5-x+beta*F"),
    pytest.param(0.7, 1.0, lambda x, f, ln: 0.7 * x + f, id="6-alpha*x+F"),
    pytest.param(0.75, 0.25, lambda x, f, ln: 0.75 * x + 0.25 * f + 0.1875 * ln, id="7-highway+LN"),
]


@pytest.mark.parametrize("layout", residual.LAYOUTS)
@pytest.mark.parametrize("a,b,expected", TABLE2)
def test_sas_table2_special_cases_with_tied_gamma(monkeypatch, layout, a, b, expected):
    """Paper 000 Table 2: y = a*x + b*F + (1-a)(1-b)*LN(x + F) (Eq. 4). Only the two gates a and b
    are forced; the module itself must tie gamma, e.g. row 7 (1-beta, beta), beta = 0.25:
    0.75x + 0.25F + 0.1875*LN(x+F)."""
    x, f = pair(layout)
    m = build("sas", DIM, layout)
    monkeypatch.setattr(m.gate_a, "from_pooled", lambda px, pf: torch.tensor(a))
    monkeypatch.setattr(m.gate_b, "from_pooled", lambda px, pf: torch.tensor(b))
    close(m(x, f), expected(x, f, ln_ref(x + f, layout)))
    close(m.last_gates["gamma"], torch.tensor((1 - a) * (1 - b)))


@pytest.mark.parametrize("layout", residual.LAYOUTS)
@pytest.mark.parametrize("args", [{}, {"gamma": "free"}, {"gate": "single"}, {"gate": "transform", "gamma": "free"}])
def test_sas_pools_once_for_all_gates_and_gives_each_gates_own_output(layout, args):
    """SAS pools x and F once for all its gates (from_pooled); each gate's value is what the gate
    alone gives from x and F, and y is Eq. (3) over them."""
    x, f = pair(layout)
    m = build("sas", DIM, layout, args)
    for gate in (m.gate_a, m.gate_b, m.gate_gamma):
        if gate is not None:
            nn.init.normal_(gate.weight if isinstance(gate, nn.Linear) else gate.net[0].weight, std=0.5)
    a, b = m.gate_a(x, f), m.gate_b(x, f)
    gamma = m.gate_gamma(x, f) if m.gate_gamma is not None else (1 - a) * (1 - b)
    close(m(x, f), a * x + b * f + gamma * m.norm(x + f))
    for key, expected in (("a", a), ("b", b), ("gamma", gamma)):
        close(m.last_gates[key], expected)


def test_sas_formula_directly():
    """Eq. (3) with per-example gates broadcast over (C, H, W): y = a*x + b*F + gamma*N(x + F)."""
    x, f = pair("conv")
    g = torch.Generator().manual_seed(5)
    a, b, gamma = (torch.rand(2, 1, 1, 1, generator=g) for _ in range(3))
    norm = nn.GroupNorm(1, DIM)
    y = sas_formula(x, f, a, b, gamma, norm)
    for n in range(2):
        expected = a[n] * x[n] + b[n] * f[n] + gamma[n] * ln_ref(x + f, "conv")[n]
        close(y[n], expected)


@pytest.mark.parametrize("layout", residual.LAYOUTS)
def test_scaling_gate_eq2_by_hand(layout):
    """Paper 000 Eq. (2): a = sigmoid(Tanh([x; F] W_f + b_f) W_ff + b_ff), computed by hand from the
    module's weights on [x; F] pooled by the spatial mean (conv) or per token (seq)."""
    torch.manual_seed(0)
    m = build("sas", DIM, layout)
    x, f = pair(layout, scale=2.0)
    lin1, lin2 = m.gate_a.net[0], m.gate_a.net[2]
    if layout == "conv":
        z = torch.cat([x.mean(dim=(2, 3)), f.mean(dim=(2, 3))], dim=-1)  # (N, 2C)
    else:
        z = torch.cat([x, f], dim=-1)  # (N, T, 2D)
    s = torch.tanh(z @ lin1.weight.T + lin1.bias) @ lin2.weight.T + lin2.bias
    a = torch.sigmoid(s)
    if layout == "conv":
        a = a[:, :, None, None]
    with torch.no_grad():
        close(m.gates(x, f)[0], a)


def test_highway_gate_reads_spatial_mean_of_x():
    """Highway's transform gate (000 Table 6) on conv: T = sigmoid(mean_HW(x) W^T + b), per channel,
    from x only (F does not enter the gate)."""
    torch.manual_seed(0)
    m = build("highway", DIM, "conv")
    x, f = pair("conv", scale=2.0)
    t = torch.sigmoid(x.mean(dim=(2, 3)) @ m.transform.weight.T + m.transform.bias)[:, :, None, None]
    with torch.no_grad():
        close(m(x, f), t * f + (1 - t) * x)
        close(m(x, 5 * f), t * 5 * f + (1 - t) * x)


def _n_params(module):
    return sum(p.numel() for p in module.parameters())


def test_sas_real_gates_start_near_bias():
    """Paper 000 Sec. 4.2 (CIFAR): gate biases 3 for alpha and -3 for beta, so training starts near
    x + small*F: on small inputs a ~ sigmoid(3) ~ 0.953, b ~ sigmoid(-3) ~ 0.047, one scalar per
    example (conv gates pool over space), and gamma = (1-a)(1-b)."""
    torch.manual_seed(0)
    C = 16
    m = build("sas", C, "conv")
    g = torch.Generator().manual_seed(1)
    x = 1e-3 * torch.randn(8, C, 4, 4, generator=g)
    f = 1e-3 * torch.randn(8, C, 4, 4, generator=g)
    a, b, gamma = m.gates(x, f)
    assert a.shape == (8, 1, 1, 1) and b.shape == (8, 1, 1, 1)
    assert abs(a.mean().item() - 1 / (1 + math.exp(-3))) < 0.015
    assert abs(b.mean().item() - 1 / (1 + math.exp(3))) < 0.015
    close(gamma, (1 - a) * (1 - b))
    # the gates keep the last values for Fig. 3's analysis, detached
    m(x, f)
    assert set(m.last_gates) == {"a", "b", "gamma"}
    assert not m.last_gates["a"].requires_grad
    close(m.last_gates["a"], a.detach())


def test_sas_gates_depend_on_input():
    """The scaling gate reads [x; F] (Eq. 2): different inputs give different gate values."""
    torch.manual_seed(0)
    m = build("sas", DIM, "seq")
    x, f = pair("seq", scale=3.0)
    a, b, _ = m.gates(x, f)
    assert a.shape == (2, 3, 1)  # one gate per token
    assert a.std() > 1e-4 and b.std() > 1e-4


def test_sas_gate_shapes_and_options():
    """Eq. (2) full gate: W_f in R^{2h x h}, b_f, W_ff in R^{h x 1}, b_ff; Table 6's single-layer
    gate has exactly 2h+1 parameters; `gamma: free` (footnote 1) adds a third gate; `norm: bn`
    (Table 7) uses BatchNorm2d, the default LN is GroupNorm with one group."""
    C = 16
    full = build("sas", C, "conv")
    assert _n_params(full.gate_a) == _n_params(full.gate_b) == 2 * C * C + C + C + 1
    assert full.gate_gamma is None
    assert isinstance(full.norm, nn.GroupNorm) and full.norm.num_groups == 1
    single = build("sas", C, "conv", {"gate": "single"})
    assert _n_params(single.gate_a) == 2 * C + 1
    assert _n_params(single.gate_b) == 2 * C + 1
    free = build("sas", C, "conv", {"gamma": "free"})
    assert _n_params(free.gate_gamma) == _n_params(full.gate_a)
    assert _n_params(free) == _n_params(full) + _n_params(full.gate_a)
    x, f = pair("conv")
    x, f = x.repeat(1, 4, 1, 1), f.repeat(1, 4, 1, 1)  # C = 16
    a, b, gamma = free.gates(x, f)
    assert not torch.allclose(gamma, (1 - a) * (1 - b))  # not tied any more
    assert abs(gamma.mean().item() - 1 / (1 + math.exp(3))) < 0.05  # bias -3 at init
    bn = build("sas", C, "conv", {"norm": "bn"})
    assert isinstance(bn.norm, nn.BatchNorm2d)
    assert isinstance(build("sas", C, "seq").norm, nn.LayerNorm)


@pytest.mark.parametrize("layout", residual.LAYOUTS)
def test_sas_with_the_transform_gate_predicts_a_and_b_from_x_alone(layout):
    """Paper 000 Table 6, "+ Transform Gate": SAS's block, with Highway's transform gate
    T(x) = sigmoid(x W^T + b) predicting a and b, per channel (conv: from mean_HW(x)) or feature,
    each with h*h + h parameters; F does not enter the gates; gamma stays (1-a)(1-b)."""
    torch.manual_seed(0)
    m = build("sas", DIM, layout, {"gate": "transform"})
    assert isinstance(m.gate_a, residual.TransformGate) and isinstance(m.gate_b, residual.TransformGate)
    assert _n_params(m.gate_a) == _n_params(m.gate_b) == DIM * DIM + DIM
    assert torch.all(m.gate_a.bias == 3.0) and torch.all(m.gate_b.bias == -3.0)  # the SAS biases
    x, f = pair(layout, scale=2.0)
    pooled = x.mean(dim=(2, 3)) if layout == "conv" else x
    with torch.no_grad():
        a = per_channel_gate(torch.sigmoid(pooled @ m.gate_a.weight.T + m.gate_a.bias), layout)
        b = per_channel_gate(torch.sigmoid(pooled @ m.gate_b.weight.T + m.gate_b.bias), layout)
        close(m(x, f), a * x + b * f + (1 - a) * (1 - b) * m.norm(x + f))
        close(m.gates(x, 5 * f)[0], a)
        assert a.shape == ((2, DIM, 1, 1) if layout == "conv" else x.shape)


def per_channel_gate(g, layout):
    return g[:, :, None, None] if layout == "conv" else g


def test_highway_keeps_its_parameter_names():
    """Highway's gate is the shared TransformGate, under the name checkpoints already hold."""
    m = build("highway", DIM, "conv")
    assert sorted(name for name, _ in m.named_parameters()) == ["transform.bias", "transform.weight"]


# --------------------------------------------------------------------------- validate / variant_id


def test_unknown_variant_lists_allowed_names():
    """A bad config fails with the key and the allowed values in the message (docs/design.md: checks name the key)."""
    with pytest.raises(ConfigError) as e:
        validate("xskipp")
    msg = str(e.value)
    assert "xskipp" in msg
    for name in residual.REGISTRY:
        assert name in msg


@pytest.mark.parametrize(
    "name,args",
    [
        ("xskip", {"lam": "2"}),  # a string is not a number
        ("xskip", {"lam": -1}),
        ("xskip", {"lam": 0}),
        ("xskip_ln", {"lam": 0.0}),
        ("xskip", {"lam": True}),  # bool is not a number
        ("rskip_ln", {"lam": 1.5}),  # 001: "lambda should be an integer no smaller than one"
        ("rskip_ln", {"lam": 0}),
        ("rskip_ln", {"lam": True}),
        ("rskip_bn", {"lam": "2"}),
    ],
)
def test_bad_lam_is_config_error(name, args):
    """lam must be > 0 (xskip family) or an integer >= 1 (rskip family); the message names lam."""
    with pytest.raises(ConfigError, match="lam"):
        validate(name, args)
    with pytest.raises(ConfigError, match="lam"):
        build(name, DIM, "conv", args)


def test_bad_choice_and_unknown_arg():
    """String options are checked against their allowed values; an unknown arg is named."""
    with pytest.raises(ConfigError, match="norm"):
        validate("sas", {"norm": "gn"})
    with pytest.raises(ConfigError, match="gate"):
        validate("sas", {"gate": 1})
    with pytest.raises(ConfigError, match="lamda"):
        validate("xskip", {"lamda": 2})
    with pytest.raises(ConfigError, match="lam"):
        validate("add", {"lam": 2})  # add takes no argument


def test_config_errors_say_where_what_and_what_is_allowed():
    """The exact messages a user reads when a table row is wrong (the key, the value, the rule)."""
    cases = [
        (lambda: validate("xskip", {"lam": "2"}), "variant (xskip): lam='2' is invalid; expected a number > 0"),
        (lambda: validate("rskip_ln", {"lam": 1.5}, where="t.rows[3]"), "t.rows[3] (rskip_ln): lam=1.5 is invalid; expected an integer >= 1"),
        (lambda: validate("add", {"lam": 2}), "variant: add has no argument 'lam'; allowed: none"),
        (lambda: validate("xskip", {"lamda": 2}), "variant: xskip has no argument 'lamda'; allowed: lam"),
        (lambda: validate("sas", {"gate": "tiny"}), "variant (sas): gate='tiny' is invalid; expected one of full, single, transform"),
        (lambda: build("add", DIM, "image"), "layout 'image' unknown; allowed: conv, seq"),
    ]
    for call, message in cases:
        with pytest.raises(ConfigError) as err:
            call()
        assert str(err.value) == message
    with pytest.raises(ConfigError) as err:
        validate("xskipp")
    assert str(err.value) == f"variant: unknown variant 'xskipp'; allowed: {', '.join(sorted(residual.REGISTRY))}"


def test_validate_fills_defaults_and_accepts_int_for_float():
    """validate returns the full arg dict; an int is accepted where a float is declared."""
    full = validate("xskip", {"lam": 2})
    assert full == {"lam": 2.0} and type(full["lam"]) is float
    assert validate("rskip_ln") == {"lam": 1}
    assert validate("add") == {}
    assert validate("sas", {"norm": "bn"}) == {
        "norm": "bn", "gate": "full", "gamma": "tied", "bias_a": 3.0, "bias_b": -3.0, "bias_gamma": -3.0,
    }


def test_variant_id_exact_strings():
    """Ids are the name plus every non-default argument, short and path-safe."""
    assert variant_id("add") == "add"
    assert variant_id("xskip_ln", {"lam": 2}) == "xskip_ln-lam2"
    assert variant_id("xskip", {"lam": 0.5}) == "xskip-lam0.5"
    assert variant_id("sas", {"norm": "bn"}) == "sas-normbn"
    assert variant_id("rskip_ln", {"lam": 2}) == "rskip_ln-lam2"
    assert variant_id("xskip_ln", {"lam": 1}) == "xskip_ln"  # default omitted
    assert variant_id("sas", {"gate": "single", "gamma": "free"}) == "sas-gatesingle-gammafree"
    with pytest.raises(ConfigError):
        variant_id("nope")


@pytest.mark.config
def test_variant_ids_unique_over_paper_tables():
    """Every distinct (variant, full args) used in config/tables/*.yaml gets a distinct id, and the
    same cell (e.g. 001's "1rSkip+LN" = "1xSkip+LN", args {lam: 1} vs defaults) one id."""
    ids: dict[str, tuple] = {}
    for row in table_rows():
        key = (row["variant"], tuple(sorted(validate(row["variant"], row.get("args")).items())))
        vid = variant_id(row["variant"], row.get("args"))
        assert "/" not in vid and " " not in vid
        assert ids.setdefault(vid, key) == key, f"id {vid!r} names both {ids[vid]} and {key}"
    assert len(ids) >= 15


# --------------------------------------------------------------------------- mixed precision


@pytest.mark.parametrize("layout", residual.LAYOUTS)
@pytest.mark.parametrize("name, args", [("sas", {}), ("sas", {"gate": "single"}), ("sas", {"gate": "transform"}),
                                        ("sas", {"gamma": "free"}), ("highway", {})])
def test_gates_are_float32_under_bf16_autocast(layout, name, args):
    """A gate under autocast is computed as in a float32 forward (to 1e-6), so it neither drifts at
    initialisation nor saturates to exactly 1.0 from a logit near 6 as bf16 does; the block's
    output is no less precise than bf16's own rounding of the float32 result."""
    torch.manual_seed(0)
    m = build(name, 16, layout, args)
    x, f = pair(layout, scale=2.0)
    dim = 1 if layout == "conv" else 2
    # the values a bf16 network hands the block: the float32 reference sees the same numbers
    x, f = (t.repeat_interleave(4, dim=dim).bfloat16().float() for t in (x, f))
    gate_modules = [m.transform] if name == "highway" else [g for g in (m.gate_a, m.gate_b, m.gate_gamma) if g is not None]
    reference = [g(x, f) for g in gate_modules]
    y_reference = m(x, f)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = [g(x.bfloat16(), f.bfloat16()) for g in gate_modules]
        y_mixed = m(x.bfloat16(), f.bfloat16())
    for got, want in zip(mixed, reference):
        assert got.dtype == torch.float32
        assert torch.allclose(got, want, rtol=0, atol=1e-6), (got - want).abs().max()
    # the skip and branch terms stay as autocast computes them; the gates' share is exact
    assert torch.allclose(y_mixed.float(), y_reference, rtol=1e-2, atol=1e-2)
    if name == "sas":
        assert all(t.dtype == torch.float32 for t in m.last_gates.values())


def test_a_gate_logit_of_8_is_below_one_under_autocast():
    """bf16 rounds sigmoid(8) = 0.99966 to exactly 1.0 (its spacing near 1 is 2^-8); the gate must not."""
    gate = residual.TransformGate(2, "seq", bias=8.0)
    nn.init.zeros_(gate.weight)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        t = gate(torch.ones(1, 1, 2))
    assert torch.all(t < 1.0) and torch.allclose(t, torch.full_like(t, 1 / (1 + math.exp(-8))), atol=1e-7)


def test_pooling_for_the_gates_is_the_spatial_mean_and_its_backward_divides_before_broadcasting():
    """The same values and gradients as `mean` (to the last bit), on a map that is not square; the
    backward's only division is of the (N, C) gradient (mean's divides the whole map)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Divisions(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.shapes = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket is torch.ops.aten.div:
                self.shapes.append(tuple(args[0].shape))
            return func(*args, **(kwargs or {}))

    x = torch.randn(2, 3, 4, 6, requires_grad=True)
    pooled = residual.pool_for_gate(x, "conv")
    assert torch.equal(pooled, x.mean(dim=(2, 3)))
    weights = torch.randn(2, 3)
    (grad,) = torch.autograd.grad((pooled * weights).sum(), x)
    (mean_grad,) = torch.autograd.grad((x.mean(dim=(2, 3)) * weights).sum(), x)
    assert torch.equal(grad, mean_grad) and torch.allclose(grad, (weights / 24)[:, :, None, None].expand(2, 3, 4, 6))
    with Divisions() as divisions:
        (residual.pool_for_gate(x, "conv") * weights).sum().backward()
    assert divisions.shapes and all(shape == (2, 3) for shape in divisions.shapes)
    tokens = torch.randn(2, 5, 3)
    assert residual.pool_for_gate(tokens, "seq") is tokens
