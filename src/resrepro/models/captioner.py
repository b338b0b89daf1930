"""Transformer captioner for paper 000's Table 5: an encoder over image features, the translation
track's decoder, every sublayer combined through the residual registry.

Paper 000 (Sec. 4.3) says only that its captioner is based on "the multi-head attention mechanism
(Vaswani et al., 2017)". This follows the common Transformer captioner of its time (Herdade et al.
2019, Cornia et al. 2020, Luo et al. 2021; the choices and their sources are in config/paper.yaml
and docs/captioning.md):
- the image is a set of regions (grid cells or detected boxes), each a feature vector whose last
  two entries are the region's centre (data/features.py); a linear map to d, ReLU, dropout and
  LayerNorm embed it, with no further position encoding;
- 3 encoder and 3 decoder layers, d 512, 8 heads, FFN 2048, dropout 0.1; the encoder and decoder
  layers are transformer.EncoderLayer and DecoderLayer, so baseline (post-LN, LN(x + F)) and SAS
  are the same registry entries as in the translation rows of the table beside it;
- words embedded as in the translation Transformer (scaled by sqrt(d), sinusoidal positions,
  the embedding shared with the softmax).

Padding regions (fewer boxes than the most an image has) are rows of zeros in the features: the
encoder's mask hides them.
"""

from __future__ import annotations

import torch
from torch import nn

from ..specs import MISSING, ModelSpec
from .registry import register
from .transformer import Transformer, TransformerConfig

PRESETS = {
    # Herdade et al. 2019 / Cornia et al. 2020 (M2, 3 layers) / Luo et al. 2021 (RSTNet)
    "paper": dict(d_model=512, heads=8, ffn=2048, encoder_layers=3, decoder_layers=3, dropout=0.1),
    # the mini scale: the translation track's mini width (feed-forward 2d), 2 + 2 layers for 16 regions
    # and ~8-word captions
    "mini": dict(d_model=64, heads=4, ffn=128, encoder_layers=2, decoder_layers=2, dropout=0.1),
}


class Captioner(Transformer):
    """`encode` takes features (N, regions, feature_dim); the decoder, decoding and loss are the
    Transformer's, so beam search and checkpoint averaging need nothing new."""

    def __init__(self, cfg: TransformerConfig, feature_dim: int):
        super().__init__(cfg)
        d = cfg.d_model
        self.project = nn.Sequential(nn.Linear(feature_dim, d), nn.ReLU(), nn.Dropout(cfg.dropout), nn.LayerNorm(d))

    def src_mask(self, features: torch.Tensor) -> torch.Tensor:
        return (features != 0).any(-1)[:, None, None, :]  # (N, 1, 1, regions): True = a real region

    def source_lengths(self, features: torch.Tensor) -> list[int]:
        return (features != 0).any(-1).sum(1).tolist()

    def encode(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if features.dim() != 3:
            raise ValueError(f"features must be (N, regions, dim); got shape {tuple(features.shape)}")
        mask = self.src_mask(features)
        return self.encode_stack(self.project(features.to(self.project[0].weight.dtype)), mask), mask


@register("transformer_captioner")
def build(spec: ModelSpec) -> Captioner:
    if spec.size not in PRESETS:
        raise ValueError(f"captioner size {spec.size!r} unknown; allowed: {', '.join(PRESETS)}")
    extra = {"dropout": spec.dropout} if spec.dropout is not MISSING else {}
    cfg = TransformerConfig(vocab_size=spec.need("vocab_size"), **{**PRESETS[spec.size], **extra}, variant=spec.variant,
                            args=spec.get("args"), pad_id=spec.need("pad_id"))
    return Captioner(cfg, spec.need("feature_dim"))
