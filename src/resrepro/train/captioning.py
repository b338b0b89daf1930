"""Train one captioning run: cross-entropy on every reference caption, in the translation track's loop.

Each caption of each training image is one example (the usual recipe: Cornia et al. 2020, batch 50
captions); an epoch is every caption once, in batches of `batch_size` captions drawn in a shuffled
order. Adam with the inverse square-root schedule and warm-up, checkpoints, resume, divergence,
averaging and DDP are the translation loop's (train/translation.train_sequences), unchanged.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ..data import captions
from .translation import shifted_targets, train_sequences


class CaptionedImages:
    """A captioning split as the training loop reads it (see translation.TokenPairs): examples are
    (image, caption) pairs; `collate` gives the images' features (N, regions, dim) as the source."""

    def __init__(self, split: captions.CaptionSplit, vocabulary: list[str], spec: dict):
        self.features, self.spec = split.features, spec
        self.pairs = captions.training_pairs(split, vocabulary)
        regions = split.features.shape[1]
        self.lengths = [(regions, len(c) + 1) for _, c in self.pairs]

    def batches(self, generator: torch.Generator) -> list[list[int]]:
        order = torch.randperm(len(self.pairs), generator=generator).tolist()
        size = self.spec["batch_size"]
        return [order[i : i + size] for i in range(0, len(order), size)]

    def collate(self, idx: list[int]):
        images = np.asarray([self.pairs[i][0] for i in idx])
        features = torch.from_numpy(np.asarray(self.features[images], dtype=np.float32))
        return (features, *shifted_targets([self.pairs[i][1] for i in idx], self.spec["pad_id"], self.spec["bos_id"], self.spec["eos_id"]))


def train(spec: dict, data_dir: str | Path, out_dir: str | Path, device: str = "auto", progress: bool = True) -> dict:
    """Run (or resume) one captioning run on a prepared dataset (data/captions.py); writes
    out_dir/{train_log.csv, metrics.json, checkpoints/} as a translation run does."""
    meta, vocabulary = captions.load_meta(data_dir), captions.load_vocabulary(data_dir)
    train_data = CaptionedImages(captions.load_split(data_dir, "train"), vocabulary, spec)
    dev_data = CaptionedImages(captions.load_split(data_dir, "val"), vocabulary, spec)
    inputs = {"vocab_size": len(vocabulary), "feature_dim": meta["features"]["dim"]}
    return train_sequences(spec, train_data, dev_data, inputs, out_dir, device, progress)
