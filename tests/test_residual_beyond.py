"""The residual designs that came after the papers (issue 16): each variant's special cases against
values computed by hand, and the hooks the models apply for them (branch input, branch weights,
final norm, Admin's profile).

Sources: Pre-LN (Xiong et al. 2020), ReZero (Bachlechner et al. 2021), SkipInit (De and Smith
2020), LayerScale (Touvron et al. 2021, CaiT), DeepNorm (Wang et al. 2022, DeepNet), Admin (Liu et
al. 2020).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from resrepro import catalog, residual
from resrepro.models.preact_resnet import PreActResNet
from resrepro.models.transformer import Transformer, TransformerConfig
from resrepro.residual import ConfigError, Place, build, deepnorm_constants, layerscale_init
from test_residual import close, ln_ref, pair

DIM = 4
NET9 = Place("net", (("net", 9),), 9)


def transformer_place(stack: str, n: int, m: int) -> Place:
    return Place(stack, (("encoder", n), ("decoder", m)), 2 * n + 3 * m)


# --------------------------------------------------------------------------- the formulas


@pytest.mark.parametrize("layout", residual.LAYOUTS)
def test_rezero_is_the_identity_at_initialisation_then_x_plus_a_f(layout):
    m = build("rezero", DIM, layout)
    x, f = pair(layout)
    assert torch.equal(m(x, f), x)
    with torch.no_grad():
        m.scale.fill_(0.25)
    close(m(x, f), x + 0.25 * f)
    assert [n for n, _ in m.named_parameters()] == ["scale"] and m.scale.numel() == 1


@pytest.mark.parametrize("layout", residual.LAYOUTS)
def test_skipinit_starts_at_one_over_sqrt_d_or_its_init(layout):
    x, f = pair(layout)
    close(build("skipinit", DIM, layout, place=NET9)(x, f), x + f / 3.0)  # d = 9 branches: 1/sqrt(9)
    close(build("skipinit", DIM, layout, place=Place("net", (("net", 9),), 16))(x, f), x + f / 4.0)  # d is the branch count
    close(build("skipinit", DIM, layout, {"init": 0.5}, place=NET9)(x, f), x + 0.5 * f)
    assert torch.equal(build("skipinit", DIM, layout, {"init": 0}, place=NET9)(x, f), x)


def test_layerscale_initial_diagonal_follows_cait_by_depth():
    assert [layerscale_init(d) for d in (6, 18, 19, 24, 25, 54)] == [0.1, 0.1, 1e-5, 1e-5, 1e-6, 1e-6]


@pytest.mark.parametrize("layout", residual.LAYOUTS)
def test_layerscale_is_x_plus_a_per_channel_diagonal_times_f(layout):
    x, f = pair(layout)
    m = build("layerscale", DIM, layout, place=NET9)
    assert m.diag.shape == (DIM,) and torch.all(m.diag == 0.1)
    close(m(x, f), x + 0.1 * f)
    with torch.no_grad():
        m.diag.copy_(torch.tensor([1.0, 2.0, 0.0, -1.0]))
    d = torch.tensor([1.0, 2.0, 0.0, -1.0])
    close(m(x, f), x + (d[None, :, None, None] if layout == "conv" else d) * f)
    deep = build("layerscale", DIM, layout, place=Place("net", (("net", 54),), 54))
    assert torch.all(deep.diag == 1e-6)
    assert torch.all(build("layerscale", DIM, layout, {"init": 0.3}, place=NET9).diag == 0.3)


@pytest.mark.parametrize("n, m, enc, dec", [
    (6, 6, (1.417938, 0.496989), (2.059767, 0.343295)),     # base and big: 6 + 6 layers
    (3, 3, (1.141788, 0.617190), (1.732051, 0.408248)),     # mini
    (12, 12, (1.760878, 0.400198), (2.449490, 0.288675)),
    (24, 24, (2.186760, 0.322258), (2.912951, 0.242746)),
    (12, 6, (1.686222, 0.417916), (2.059767, 0.343295)),    # N != M: the encoder's N^4 M, not M^4 N (1.4807)
])
def test_deepnorm_alpha_and_beta_of_an_encoder_decoder(n, m, enc, dec):
    """Wang et al. 2022: encoder 0.81 (N^4 M)^(1/16) and 0.87 (N^4 M)^(-1/16); decoder (3M)^(1/4), (12M)^(-1/4)."""
    assert deepnorm_constants(transformer_place("encoder", n, m)) == pytest.approx(enc, abs=1e-6)
    assert deepnorm_constants(transformer_place("decoder", n, m)) == pytest.approx(dec, abs=1e-6)


def test_deepnorm_alpha_and_beta_of_one_stack_of_blocks():
    """A ResNet of L blocks: L^(1/4) and (4L)^(-1/4) (DeepNet's one-stack rule, one sublayer a block)."""
    assert deepnorm_constants(Place("net", (("net", 54),), 54)) == pytest.approx((2.710806, 0.260847), abs=1e-6)  # ResNet-110
    assert deepnorm_constants(NET9) == pytest.approx((math.sqrt(3), 1 / 6**0.5), abs=1e-9)


@pytest.mark.parametrize("layout", residual.LAYOUTS)
def test_deepnorm_is_layer_norm_of_alpha_x_plus_f_and_scales_the_branch_by_beta(layout):
    m = build("deepnorm", DIM, layout, place=NET9)
    x, f = pair(layout)
    close(m(x, f), ln_ref(math.sqrt(3) * x + f, layout))
    w = torch.randn(200, 300)
    before = w.clone()
    m.init_branch([w])
    if layout == "conv":  # He's draw times beta
        close(w, before / 6**0.5)
    else:  # drawn again: Xavier-normal with gain beta
        assert w.std().item() == pytest.approx(math.sqrt(2 / 500) / 6**0.5, rel=0.02)


@pytest.mark.parametrize("layout", residual.LAYOUTS)
def test_pre_ln_normalises_the_branch_input_and_adds_without_a_norm(layout):
    m = build("pre_ln", DIM, layout, place=NET9)
    x, f = pair(layout)
    close(m.branch_input(x), ln_ref(x, layout))
    close(m(x, f), x + f)
    assert m.final_norm and not residual.REGISTRY["add"].final_norm


def test_every_other_variant_leaves_the_hooks_alone():
    x, _ = pair("seq")
    w = torch.randn(3, 3)
    for name, cls in residual.REGISTRY.items():
        if name in ("pre_ln", "deepnorm") or name.endswith("_bn"):
            continue
        m = build(name, DIM, "seq", place=NET9 if cls.placed else None)
        assert m.branch_input(x) is x
        before = w.clone()
        m.init_branch([w])
        assert torch.equal(w, before), name
        assert not m.final_norm


# --------------------------------------------------------------------------- Admin's profile


class TwoStacks(nn.Module):
    """Three Admin residuals in an "encoder", one in a "decoder", with fixed branches, and a BN whose
    running statistics the profile must not move."""

    def __init__(self, fs):
        super().__init__()
        self.fs = fs
        self.bn = nn.BatchNorm1d(DIM)
        self.enc = nn.ModuleList(build("admin", DIM, "seq", place=transformer_place("encoder", 3, 1)) for _ in range(3))
        self.dec = build("admin", DIM, "seq", place=transformer_place("decoder", 2, 1))

    def forward(self, x):
        h = self.bn(x.transpose(1, 2)).transpose(1, 2)
        for admin, f in zip(self.enc, self.fs):
            h = admin(h, f)
        return self.dec(x, self.fs[3])


def test_admin_profile_sets_each_w_from_the_variance_before_it_per_stack():
    x, f1 = pair("seq", seed=1)
    _, f2 = pair("seq", 3.0, seed=2)
    _, f3 = pair("seq", 2.0, seed=3)
    _, f4 = pair("seq", 0.5, seed=4)
    model = TwoStacks([f1, f2, f4, f3])
    model.eval()
    with torch.no_grad():
        h0 = (x - x.mean(dim=(0, 1))) / torch.sqrt(x.var(dim=(0, 1), unbiased=False) + 1e-5)  # BN in training mode
    assert residual.initialize(model, lambda: model(x))
    first, second, third = model.enc
    assert torch.all(first.w == 1.0)  # the first residual of a stack
    expected = math.sqrt(h0.var().item() + f1.var().item())  # Var[1 * x_1] + Var[F_1]
    close(second.w, torch.full((DIM,), expected))
    with torch.no_grad():
        h1 = ln_ref(h0 + f1, "seq")
    close(third.w, torch.full((DIM,), math.sqrt((expected * h1).var().item() + f2.var().item())))  # Var[w_2 x_2] + Var[F_2]
    assert torch.all(model.dec.w == 1.0)  # the decoder is a stack of its own
    assert torch.equal(model.bn.running_mean, torch.zeros(DIM)) and model.bn.num_batches_tracked == 0
    assert not model.training and first.profile is None
    w = second.w.detach().clone()
    model(x)  # an ordinary forward leaves w alone
    assert torch.equal(second.w, w)
    close(second(h0, f2), ln_ref(expected * h0 + f2, "seq"))


def test_initialize_is_a_no_op_without_admin():
    model = PreActResNet(8, 10, "add", {}, in_channels=1)
    calls = []
    assert not residual.initialize(model, lambda: calls.append(1))
    assert calls == []


# --------------------------------------------------------------------------- in the models


def test_placed_variants_need_a_place_and_a_placing_architecture():
    for name in catalog.PLACED_VARIANTS:
        with pytest.raises(ConfigError, match="needs its model's depth"):
            build(name, DIM, "seq")
    with pytest.raises(ConfigError, match="simple_net does not supply.*preact_resnet"):
        catalog.check_placed("deepnorm", catalog.architecture("simple_net"), "t.rows[0]")
    catalog.check_placed("deepnorm", catalog.architecture("transformer"), "t.rows[0]")
    catalog.check_placed("rezero", catalog.architecture("simple_net"), "t.rows[0]")


def small_transformer(variant: str, seed: int = 0, layers: int = 2) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(vocab_size=30, d_model=8, heads=2, ffn=16, encoder_layers=layers, decoder_layers=layers,
                                         dropout=0.0, variant=variant))


def test_deepnorm_transformer_draws_the_value_path_from_xavier_normal_with_gain_beta():
    """DeepNet's pseudocode: xavier_normal_(w, gain=beta) for the FFN, v and out projections, so
    their spread is beta * sqrt(2 / (fan_in + fan_out)); q and k keep the model's draw (same seed,
    same draws as the post-LN model: LayerNorm draws nothing)."""
    torch.manual_seed(0)
    base = Transformer(TransformerConfig(vocab_size=30, d_model=64, heads=4, ffn=256, encoder_layers=2, decoder_layers=2, variant="xskip_ln"))
    torch.manual_seed(0)
    deep = Transformer(TransformerConfig(vocab_size=30, d_model=64, heads=4, ffn=256, encoder_layers=2, decoder_layers=2, variant="deepnorm"))
    beta_enc, beta_dec = deepnorm_constants(transformer_place("encoder", 2, 2))[1], deepnorm_constants(transformer_place("decoder", 2, 2))[1]
    for w, beta, fans in [(deep.encoder[1].attn.v.weight, beta_enc, 128), (deep.encoder[0].ffn.down.weight, beta_enc, 320),
                          (deep.decoder[0].cross_attn.o.weight, beta_dec, 128), (deep.decoder[1].ffn.up.weight, beta_dec, 320)]:
        assert w.std().item() == pytest.approx(beta * math.sqrt(2 / fans), rel=0.05)
    assert base.encoder[1].attn.v.weight.std().item() == pytest.approx(1 / math.sqrt(3 * 64), rel=0.05)  # torch's own draw differs
    assert torch.equal(deep.encoder[0].attn.q.weight, base.encoder[0].attn.q.weight)  # drawn before any value path
    for layer in (deep.encoder[1].attn, deep.decoder[1].cross_attn):  # torch's draw, U(-1/sqrt(d), 1/sqrt(d))
        assert layer.k.weight.std().item() == pytest.approx(1 / math.sqrt(3 * 64), rel=0.05) and layer.k.weight.abs().max() <= 1 / 8
    assert deep.encoder[0].res_attn.alpha == pytest.approx(0.81 * 32 ** (1 / 16))


def test_deepnorm_resnet_scales_each_blocks_convolutions_after_he_init():
    torch.manual_seed(0)
    base = PreActResNet(20, 10, "xskip_ln", {}, in_channels=1)
    torch.manual_seed(0)
    deep = PreActResNet(20, 10, "deepnorm", {}, in_channels=1)
    beta = (4 * 9) ** -0.25  # 9 blocks
    close(deep.blocks[4].conv2.weight, beta * base.blocks[4].conv2.weight)
    close(deep.blocks[0].conv1.weight, beta * base.blocks[0].conv1.weight)
    assert torch.equal(deep.stem.weight, base.stem.weight) and torch.equal(deep.blocks[3].shortcut.weight, base.blocks[3].shortcut.weight)


def test_pre_ln_transformer_ends_each_stack_with_a_norm():
    model = small_transformer("pre_ln")
    assert isinstance(model.encoder_norm, nn.LayerNorm) and isinstance(model.decoder_norm, nn.LayerNorm)
    assert small_transformer("xskip_ln").encoder_norm is None
    src, tin = torch.randint(3, 30, (2, 5)), torch.randint(3, 30, (2, 4))
    with torch.no_grad():
        model.decoder_norm.weight.zero_()
        model.decoder_norm.bias.zero_()
    assert torch.equal(model(src, tin), torch.zeros(2, 4, 30))  # every logit reads the final norm
    with torch.no_grad():
        model.encoder_norm.bias.fill_(0.5)
        model.encoder_norm.weight.zero_()
    memory, _ = model.encode(src)
    assert torch.all(memory == 0.5)


def test_pre_ln_transformer_layer_feeds_every_branch_the_normed_stream():
    model = small_transformer("pre_ln", layers=1)
    layer = model.encoder[0]
    x = torch.randn(2, 5, 8)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    h = layer.res_attn.norm(x)
    y = x + layer.attn(h, h, mask)
    expected = y + layer.ffn(layer.res_ffn.norm(y))
    close(layer(x, mask), expected)


def test_pre_ln_preact_block_normalises_its_input_first_and_at_a_stage_change():
    torch.manual_seed(0)
    net = PreActResNet(8, 10, "pre_ln", {}, in_channels=1)
    net.eval()
    block = net.blocks[1]  # 16 -> 32 channels, stride 2: its norm reads 16 channels
    x = torch.randn(2, 16, 8, 8)
    out = F.relu(block.bn1(nn.functional.group_norm(x, 1, block.residual.norm.weight, block.residual.norm.bias)))
    expected = block.shortcut(out) + block.conv2(F.relu(block.bn2(block.conv1(out))))
    close(block(x), expected)
    assert block.residual.norm.weight.shape == (16,)


def test_admin_in_the_models_is_profiled_once_and_differs_from_one():
    model = small_transformer("admin")
    src, tin = torch.randint(3, 30, (4, 6)), torch.randint(3, 30, (4, 5))
    assert residual.initialize(model, lambda: model(src, tin))
    ws = [layer.res_ffn.w[0].item() for layer in model.encoder] + [model.decoder[1].res_self.w[0].item()]
    assert model.encoder[0].res_attn.w[0].item() == 1.0 and model.decoder[0].res_self.w[0].item() == 1.0
    assert all(w > 1.0 for w in ws)
