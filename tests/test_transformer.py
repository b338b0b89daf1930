"""The Transformer: residuals from the registry, incremental decoding, the papers' parameter counts."""

import math

import pytest
import torch

from resrepro import residual
from resrepro.models import count_parameters
from resrepro.models.transformer import Transformer, TransformerConfig, label_smoothed_loss, reorder_cache

SEQ_VARIANTS = [name for name in residual.REGISTRY if not name.endswith("_bn")]


def tiny(variant="xskip_ln", args=None, **over):
    cfg = dict(vocab_size=40, d_model=16, heads=4, ffn=32, encoder_layers=2, decoder_layers=2, dropout=0.0)
    cfg.update(over)
    return Transformer(TransformerConfig(variant=variant, args=args or {}, **cfg))


def batch():
    g = torch.Generator().manual_seed(0)
    src = torch.randint(1, 40, (3, 7), generator=g)
    src[0, 5:] = 0  # padding
    tgt = torch.randint(1, 40, (3, 6), generator=g)
    return src, tgt


@pytest.mark.parametrize("variant", SEQ_VARIANTS)
def test_every_sequence_variant_trains_and_decodes_incrementally(variant):
    """Every sublayer goes through the registry; incremental decoding with the key/value cache
    gives the same logits as the full causal forward pass."""
    torch.manual_seed(0)
    model = tiny(variant)
    src, tgt = batch()
    logits = model(src, tgt)
    assert logits.shape == (3, 6, 40) and torch.isfinite(logits).all()
    loss = label_smoothed_loss(logits, tgt, pad_id=0)
    loss.backward()
    assert model.embed.weight.grad is not None and torch.isfinite(model.embed.weight.grad).all()
    model.eval()
    with torch.no_grad():
        full = model(src, tgt)
        memory, mask = model.encode(src)
        cache = model.new_cache()
        steps = [model.decode_step(tgt[:, t : t + 1], memory, mask, cache, t) for t in range(tgt.shape[1])]
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_residual_modules_count_five_per_layer_pair():
    model = tiny("rskip_ln", {"lam": 2})
    found = [m for m in model.modules() if isinstance(m, residual.RSkipLN)]
    assert len(found) == 2 * 2 + 3 * 2  # encoder: attention + FFN; decoder: self, cross, FFN


def test_baseline_is_post_ln():
    """The papers' baseline LN(x + F): output of every sublayer is layer-normalised."""
    model = tiny().eval()
    src, tgt = batch()
    with torch.no_grad():
        memory, _ = model.encode(src)
    assert memory.mean(-1).abs().max() < 1e-5
    assert (memory.var(-1, unbiased=False) - 1).abs().max() < 1e-3


def test_future_tokens_do_not_leak():
    model = tiny().eval()
    src, tgt = batch()
    changed = tgt.clone()
    changed[:, 4:] = 1
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_reorder_cache_selects_hypotheses():
    model = tiny().eval()
    src, tgt = batch()
    with torch.no_grad():
        memory, mask = model.encode(src)
        cache = model.new_cache()
        model.decode_step(tgt[:, :1], memory, mask, cache, 0)
    picked = reorder_cache(cache, torch.tensor([2, 2, 0]))
    torch.testing.assert_close(picked[0]["self"]["k"][0], cache[0]["self"]["k"][2])
    torch.testing.assert_close(picked[1]["cross"]["v"][2], cache[1]["cross"]["v"][0])


def test_label_smoothing_ignores_padding():
    logits = torch.zeros(1, 3, 4)
    target = torch.tensor([[1, 2, 0]])
    # uniform logits: cross-entropy is ln 4 whatever the smoothing; the pad position is ignored
    assert label_smoothed_loss(logits, target, pad_id=0).item() == pytest.approx(torch.log(torch.tensor(4.0)).item())
    logits[0, 0, 1] = 10.0
    sharp = label_smoothed_loss(logits[:, :1], target[:, :1], pad_id=0, smoothing=0.0)
    smooth = label_smoothed_loss(logits[:, :1], target[:, :1], pad_id=0, smoothing=0.1)
    assert smooth > sharp  # smoothing penalises a confident correct prediction


def test_parameter_counts_match_paper_001_table_7():
    """Base with a 37k joint vocabulary ~63M (paper: 65M, Vaswani et al.'s count); big ~214M
    (paper: 213M); 2rSkip+LN adds one LayerNorm per sublayer: 30 x 2d = 0.03M (base), 0.06M (big)."""
    counts = {}
    for size in ("base", "big"):
        for variant, args in (("xskip_ln", {}), ("rskip_ln", {"lam": 2})):
            with torch.device("meta"):  # shapes only: no memory, no initialisation
                model = Transformer(TransformerConfig.preset(size, 37000, variant=variant, args=args))
            counts[size, variant] = count_parameters(model)
    print(counts)
    assert 62e6 < counts["base", "xskip_ln"] < 66e6
    assert 210e6 < counts["big", "xskip_ln"] < 216e6
    assert counts["base", "rskip_ln"] - counts["base", "xskip_ln"] == 30 * 2 * 512 == 30720
    assert counts["big", "rskip_ln"] - counts["big", "xskip_ln"] == 30 * 2 * 1024 == 61440


def test_two_block_preset_and_unknown_size():
    cfg = TransformerConfig.preset("base_2block", 100)
    assert (cfg.encoder_layers, cfg.decoder_layers, cfg.d_model) == (2, 2, 512)
    with pytest.raises(residual.ConfigError, match="allowed: base, big, base_2block, deep12, deep24, mini_base"):
        TransformerConfig.preset("huge", 100)


def test_sinusoid_positions_are_real_values_under_a_meta_device_context():
    """Parameter counts build models under torch.device("meta"): the position table is still the
    CPU's (sin of the first half, cos of the second), and a counted model has its real positions."""
    from resrepro.models.transformer import sinusoid_positions

    table = sinusoid_positions(5, 4)
    assert table[3].tolist() == pytest.approx([math.sin(3.0), math.sin(3e-4), math.cos(3.0), math.cos(3e-4)])
    with torch.device("meta"):
        assert torch.equal(sinusoid_positions(5, 4), table)


def test_inputs_longer_than_the_position_table_use_the_sinusoids_a_longer_table_holds():
    """Past max_positions the positions are computed for the length asked (a pure function of the
    position): a model whose table stops at 8 gives, on 12 source and 11 target tokens, teacher
    forcing and incremental decoding exactly as one whose table holds 1,024; within its table it
    reads the table itself."""
    torch.manual_seed(0)
    model = tiny().eval()
    short_table = tiny(max_positions=8).eval()
    short_table.load_state_dict(model.state_dict())  # positions are no state: only the table's length differs
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(1, 40, (2, 12), generator=g), torch.randint(1, 40, (2, 11), generator=g)
    with torch.no_grad():
        assert torch.equal(short_table(src, tgt), model(src, tgt))
        memory, mask = short_table.encode(src)
        cache = short_table.new_cache()
        steps = torch.stack([short_table.decode_step(tgt[:, t : t + 1], memory, mask, cache, t) for t in range(11)], 1)
    torch.testing.assert_close(steps, model(src, tgt), atol=1e-5, rtol=1e-5)
    assert short_table.position_rows(2, 8).data_ptr() == short_table.positions[2:8].data_ptr()
    assert torch.equal(short_table.position_rows(6, 12), model.positions[6:12])
