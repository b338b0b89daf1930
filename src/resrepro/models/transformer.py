"""Encoder-decoder Transformer (Vaswani et al. 2017) for translation, residuals from the registry.

Every sublayer (encoder self-attention and FFN; decoder self-attention, cross-attention and FFN)
computes its branch F = dropout(sublayer(x)) and hands (x, F) to a registry variant. The papers'
baseline is post-LN, y = LN(x + F) (tensor2tensor's `transformer_base_v1`, "dan" postprocess),
which is `xskip_ln` with lam 1 = `rskip_ln` with lam 1; there is no final LayerNorm, as in v1.
Following tensor2tensor: attention projections have no bias, embeddings are scaled by sqrt(d)
and share one matrix with the softmax when the vocabulary is joint, positions are sinusoidal
(sin and cos halves concatenated).

Decoding is incremental: `decode_step` feeds one token per sequence and keeps each decoder
layer's self-attention keys/values and its cross-attention keys/values in a cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch
from torch import nn
from torch.nn import functional as F

from .. import residual
from ..catalog import MAX_POSITIONS
from ..specs import MISSING, ModelSpec
from .registry import register

# The papers' configurations (Vaswani et al. 2017 Table 3; paper 001 Table 5's two-block model).
PRESETS = {
    "base": dict(d_model=512, heads=8, ffn=2048, encoder_layers=6, decoder_layers=6, dropout=0.1),
    "big": dict(d_model=1024, heads=16, ffn=4096, encoder_layers=6, decoder_layers=6, dropout=0.3),
    "base_2block": dict(d_model=512, heads=8, ffn=2048, encoder_layers=2, decoder_layers=2, dropout=0.1),
    # the depth study beyond the papers (config/tables/beyond.yaml, beyond-t3): base, 12 and 24 layers a side
    "deep12": dict(d_model=512, heads=8, ffn=2048, encoder_layers=12, decoder_layers=12, dropout=0.1),
    "deep24": dict(d_model=512, heads=8, ffn=2048, encoder_layers=24, decoder_layers=24, dropout=0.1),
    # mini scale stand-ins: big is 1.5x as wide (not 2x: d 128 took 97 s a run where d 96 takes
    # 71 s, docs/performance.md) and raises dropout as the papers' big does; 2block keeps a third
    # of the blocks as 2 of 6 does. The d-64 models' feed-forward layer is 2d wide, not the papers'
    # 4d: 10% off a mini run at the same BLEU (docs/performance.md, session 23; mini_big, off by
    # default, keeps 4d).
    "mini_base": dict(d_model=64, heads=4, ffn=128, encoder_layers=3, decoder_layers=3, dropout=0.1),
    "mini_big": dict(d_model=96, heads=8, ffn=384, encoder_layers=3, decoder_layers=3, dropout=0.3),
    "mini_2block": dict(d_model=64, heads=4, ffn=128, encoder_layers=1, decoder_layers=1, dropout=0.1),
    "mini_deep6": dict(d_model=64, heads=4, ffn=128, encoder_layers=6, decoder_layers=6, dropout=0.1),    # mini's deep12
    "mini_deep12": dict(d_model=64, heads=4, ffn=128, encoder_layers=12, decoder_layers=12, dropout=0.1),  # mini's deep24
}


@dataclass
class TransformerConfig:
    vocab_size: int
    d_model: int = 512
    heads: int = 8
    ffn: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float = 0.1  # on embeddings and on every sublayer output before the residual
    attention_dropout: float = 0.0  # tensor2tensor v1 default
    relu_dropout: float = 0.0
    variant: str = "xskip_ln"  # the post-LN baseline LN(x + F)
    args: dict = field(default_factory=dict)
    max_positions: int = MAX_POSITIONS  # the sinusoid table held; longer inputs compute theirs (position_rows)
    pad_id: int = 0

    def place(self, stack: str) -> residual.Place:
        """What a placed residual of this stack needs: both stacks' layers, and d = 2N + 3M branches."""
        return residual.Place(stack, (("encoder", self.encoder_layers), ("decoder", self.decoder_layers)),
                              2 * self.encoder_layers + 3 * self.decoder_layers)

    @classmethod
    def preset(cls, name: str, vocab_size: int, **overrides) -> "TransformerConfig":
        if name not in PRESETS:
            raise residual.ConfigError(f"transformer size {name!r} unknown; allowed: {', '.join(PRESETS)}")
        return replace(cls(vocab_size=vocab_size), **{**PRESETS[name], **overrides})

    @classmethod
    def from_spec(cls, spec: ModelSpec) -> "TransformerConfig":
        """The model a model spec names: its size preset, residual variant, padding id, vocabulary
        and, where the recipe sets it, dropout (e.g. EN-FR big: 0.1)."""
        extra = {"dropout": spec.dropout} if spec.dropout is not MISSING else {}
        return cls.preset(spec.need("size"), spec.need("vocab_size"), variant=spec.variant, args=spec.get("args"), pad_id=spec.need("pad_id"),
                          **extra)


def sinusoid_positions(length: int, d: int) -> torch.Tensor:
    """(length, d): sin of the position at geometric timescales 1..1e4 in the first half, cos in the second."""
    half = d // 2
    # on the CPU even where a device context is set: on the meta device (parameter counts) arange runs
    # torch's Python reference code, 0.16 s a model; the buffer follows the model's .to(device)
    inv_timescale = torch.exp(-math.log(1e4) * torch.arange(half, dtype=torch.float32, device="cpu") / max(half - 1, 1))
    angle = torch.arange(length, dtype=torch.float32, device="cpu")[:, None] * inv_timescale[None, :]
    return torch.cat([angle.sin(), angle.cos()], dim=1)


class MultiHeadAttention(nn.Module):
    def __init__(self, d: int, heads: int, dropout: float):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))

    def _split(self, t: torch.Tensor) -> torch.Tensor:  # (N, T, d) -> (N, heads, T, d/heads)
        n, length, d = t.shape
        return t.view(n, length, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, query, memory, mask=None, cache: dict | None = None, static: bool = False):
        """`cache` (decoding): self-attention appends this step's keys/values to it; with
        `static` (cross-attention) the memory's keys/values are computed once and reused."""
        q = self._split(self.q(query))
        if cache is not None and static and "k" in cache:
            k, v = cache["k"], cache["v"]
        else:
            k, v = self._split(self.k(memory)), self._split(self.v(memory))
            if cache is not None and not static and "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            if cache is not None:
                cache["k"], cache["v"] = k, v
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        n, _, length, _ = out.shape
        return self.o(out.transpose(1, 2).reshape(n, length, -1))

    def value_path(self) -> list[torch.Tensor]:
        """The weights DeepNorm scales (Wang et al. 2022: v_proj and out_proj; q and k keep theirs)."""
        return [self.v.weight, self.o.weight]


class FeedForward(nn.Module):
    def __init__(self, d: int, ffn: int, relu_dropout: float):
        super().__init__()
        self.up, self.down, self.drop = nn.Linear(d, ffn), nn.Linear(ffn, d), nn.Dropout(relu_dropout)

    def forward(self, x):
        return self.down(self.drop(F.relu(self.up(x))))

    def value_path(self) -> list[torch.Tensor]:
        return [self.up.weight, self.down.weight]


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        d = cfg.d_model
        self.attn = MultiHeadAttention(d, cfg.heads, cfg.attention_dropout)
        self.ffn = FeedForward(d, cfg.ffn, cfg.relu_dropout)
        place = cfg.place("encoder")
        self.res_attn = residual.build(cfg.variant, d, "seq", cfg.args, place)
        self.res_ffn = residual.build(cfg.variant, d, "seq", cfg.args, place)
        self.drop = nn.Dropout(cfg.dropout)
        self.res_attn.init_branch(self.attn.value_path())
        self.res_ffn.init_branch(self.ffn.value_path())

    def forward(self, x, src_mask):
        h = self.res_attn.branch_input(x)
        x = self.res_attn(x, self.drop(self.attn(h, h, src_mask)))
        return self.res_ffn(x, self.drop(self.ffn(self.res_ffn.branch_input(x))))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        d = cfg.d_model
        self.self_attn = MultiHeadAttention(d, cfg.heads, cfg.attention_dropout)
        self.cross_attn = MultiHeadAttention(d, cfg.heads, cfg.attention_dropout)
        self.ffn = FeedForward(d, cfg.ffn, cfg.relu_dropout)
        place = cfg.place("decoder")
        self.res_self = residual.build(cfg.variant, d, "seq", cfg.args, place)
        self.res_cross = residual.build(cfg.variant, d, "seq", cfg.args, place)
        self.res_ffn = residual.build(cfg.variant, d, "seq", cfg.args, place)
        self.drop = nn.Dropout(cfg.dropout)
        self.res_self.init_branch(self.self_attn.value_path())
        self.res_cross.init_branch(self.cross_attn.value_path())
        self.res_ffn.init_branch(self.ffn.value_path())

    def forward(self, y, memory, self_mask, src_mask, cache: dict | None = None):
        self_cache = None if cache is None else cache.setdefault("self", {})
        cross_cache = None if cache is None else cache.setdefault("cross", {})
        h = self.res_self.branch_input(y)
        y = self.res_self(y, self.drop(self.self_attn(h, h, self_mask, self_cache)))
        h = self.res_cross.branch_input(y)
        y = self.res_cross(y, self.drop(self.cross_attn(h, memory, src_mask, cross_cache, static=True)))
        return self.res_ffn(y, self.drop(self.ffn(self.res_ffn.branch_input(y))))


class Transformer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        cfg.args = residual.validate(cfg.variant, cfg.args)
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)  # shared: joint vocabulary
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)
        self.register_buffer("positions", sinusoid_positions(cfg.max_positions, cfg.d_model), persistent=False)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        self.drop = nn.Dropout(cfg.dropout)
        # a variant that never normalises the stream (Pre-LN) ends each stack with a LayerNorm
        final = residual.REGISTRY[cfg.variant].final_norm
        self.encoder_norm = nn.LayerNorm(cfg.d_model) if final else None
        self.decoder_norm = nn.LayerNorm(cfg.d_model) if final else None

    def encode_stack(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The encoder layers over embedded inputs, and the final norm where the variant has one."""
        for layer in self.encoder:
            x = layer(x, mask)
        return x if self.encoder_norm is None else self.encoder_norm(x)

    def _embed(self, tokens: torch.Tensor, offset: int = 0) -> torch.Tensor:
        length = tokens.shape[1]
        x = self.embed(tokens) * math.sqrt(self.cfg.d_model) + self.position_rows(offset, offset + length)
        return self.drop(x)

    def position_rows(self, start: int, end: int) -> torch.Tensor:
        """The sinusoids of positions start .. end - 1: rows of the table, and past its end computed
        for the length asked, as tensor2tensor computes its timing signal for any length (a test
        sentence longer than the table is decoded, not cut)."""
        if end <= len(self.positions):
            return self.positions[start:end]
        return sinusoid_positions(end, self.cfg.d_model)[start:].to(self.positions)

    def src_mask(self, src: torch.Tensor) -> torch.Tensor:
        return (src != self.cfg.pad_id)[:, None, None, :]  # (N, 1, 1, S): True = attend

    def source_lengths(self, src: torch.Tensor) -> list[int]:
        """Each source's length (its non-pad tokens): beam search's length limits scale with it."""
        if src.dim() != 2:
            raise ValueError("src must be (N, S)")
        return (src != self.cfg.pad_id).sum(1).tolist()

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = self.src_mask(src)
        return self.encode_stack(self._embed(src), mask), mask

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """The decoder's last states to the vocabulary, through the final norm where the variant has one."""
        if self.decoder_norm is not None:
            h = self.decoder_norm(h)
        return h @ self.embed.weight.t()

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: (N, S) source and (N, T) shifted target -> (N, T, vocab) logits."""
        memory, src_mask = self.encode(src)
        length = tgt_in.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool, device=src.device).tril()
        y = self._embed(tgt_in)
        for layer in self.decoder:
            y = layer(y, memory, causal, src_mask)
        return self.logits(y)

    def decode_step(self, token: torch.Tensor, memory, src_mask, cache: list[dict], step: int) -> torch.Tensor:
        """One incremental step: (N, 1) last tokens -> (N, vocab) logits; `cache` holds one dict
        per decoder layer and grows by this step's keys/values."""
        y = self._embed(token, offset=step)
        for layer, layer_cache in zip(self.decoder, cache):
            y = layer(y, memory, None, src_mask, layer_cache)
        return self.logits(y)[:, -1]

    def new_cache(self) -> list[dict]:
        return [{} for _ in self.decoder]


def reorder_cache(cache: list[dict], index: torch.Tensor) -> list[dict]:
    """Keep the cache of the sequences in `index` (beam search's surviving hypotheses)."""
    return [{kind: {k: t.index_select(0, index) for k, t in kv.items()} for kind, kv in layer.items()} for layer in cache]


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, pad_id: int, smoothing: float = 0.1) -> torch.Tensor:
    """Mean token cross-entropy with label smoothing (Vaswani et al. 2017: eps_ls = 0.1), pads ignored."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1), ignore_index=pad_id, label_smoothing=smoothing)


@register("transformer")
def build(spec: ModelSpec) -> Transformer:
    return Transformer(TransformerConfig.from_spec(spec))
