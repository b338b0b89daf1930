"""What a translation run's batching costs the host, as train/translation.py's loop does it while
the GPUs wait: TokenPairs over a corpus (once a run), one epoch's token batches (at the start of
each epoch, every rank makes them all, then takes its share), and a batch collated into padded
tensors (each batch, on the host, after the update's host sync and before the next step's kernels).

The corpus is synthetic in the prepared format (data/translation.EncodedPairs, memory-mapped
in training): N pairs whose sides have 1 to 150 subword pieces, about 28 on average (a log-normal
draw, the shape of WMT's sentence lengths). Prints the seconds and the peak memory it allocates
(tracemalloc: Python objects and numpy arrays), per million pairs and at the papers' WMT sizes:
"133K, 4.5M, and 36M training" pairs for IWSLT15 EN-VI, WMT14 EN-DE and EN-FR (paper 000, 4.1);
then the milliseconds of collating a batch (the median over the epoch's first `--collated` batches).

    .venv/bin/python benchmarks/epoch_batches.py [--pairs 1000000 --max-tokens 4096 --bucket 0 --repeats 3]

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import tracemalloc

import numpy as np
import torch

from resrepro.data.translation import EncodedPairs
from resrepro.specs import TranslationTrainSpec
from resrepro.train.translation import TokenPairs

PAPER_PAIRS = {"iwslt15_en_vi": 133_000, "wmt14_en_de": 4_500_000, "wmt14_en_fr": 36_000_000}


def synthetic_pairs(pairs: int, seed: int = 0) -> EncodedPairs:
    """`pairs` sentence pairs in the prepared format, sides of 1-150 pieces (log-normal, mean about 28)."""
    rng = np.random.default_rng(seed)
    sides = {}
    for side in ("src", "tgt"):
        lengths = np.clip(rng.lognormal(3.15, 0.55, pairs).round(), 1, 150).astype(np.int64)
        offsets = np.zeros(pairs + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        sides[f"{side}_ids"] = rng.integers(4, 32_000, int(offsets[-1]), dtype=np.int32)
        sides[f"{side}_offsets"] = offsets
    return EncodedPairs(**sides)


def seconds_of(work) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def peak_mb_of(work) -> float:
    """The most memory `work()` allocated at once (tracemalloc, which slows it: timed apart)."""
    tracemalloc.start()
    work()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return peak


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=1_000_000)
    p.add_argument("--max-tokens", type=int, default=4096, help="tokens per batch and GPU (config/paper.yaml: 4,096 or 6,250)")
    p.add_argument("--bucket", type=int, default=0, help="length_bucket (0: none)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--collated", type=int, default=300, help="batches collated for the collate figure")
    a = p.parse_args(argv)
    corpus = synthetic_pairs(a.pairs)
    spec = TranslationTrainSpec.from_dict({
        "task": "translation", "dataset": "synthetic", "arch": "transformer_base", "model": "transformer", "size": "base",
        "variant": "xskip_ln", "args": {}, "seed": 0, "world_size": 1, "max_tokens": a.max_tokens, "update_freq": 1,
        "warmup": 1, "lr_scale": 1.0, "label_smoothing": 0.1, "max_updates": 1, "checkpoint_every": 1,
        "keep_checkpoints": 1, "pad_id": 0, "bos_id": 1, "eos_id": 2, "length_bucket": a.bucket})
    data = TokenPairs(corpus, spec, max_len=1024)
    batches = data.batches(torch.Generator().manual_seed(0))
    work = {"TokenPairs (once a run)": lambda: TokenPairs(corpus, spec, max_len=1024),
            "an epoch's batches": lambda: data.batches(torch.Generator().manual_seed(0))}
    per_million = 1e6 / a.pairs
    print(f"{a.pairs:,} pairs, {len(batches):,} batches of at most {a.max_tokens:,} tokens"
          + (f" (length_bucket {a.bucket})" if a.bucket else "") + f"; median of {a.repeats}")
    for name, one in work.items():
        seconds, peak = statistics.median(seconds_of(one) for _ in range(a.repeats)), peak_mb_of(one)
        at_sizes = ", ".join(f"{corpus_name} {seconds * per_million * n / 1e6:.1f} s" for corpus_name, n in PAPER_PAIRS.items())
        print(f"{name:24s} {seconds:7.2f} s {peak:8.0f} MB allocated at most; per million pairs "
              f"{seconds * per_million:.2f} s, {peak * per_million:.0f} MB; at the papers' sizes {at_sizes}")
    chosen = batches[: a.collated]
    each = statistics.median(seconds_of(lambda: data.collate(idx)) for idx in chosen)
    print(f"{'a batch collated':24s} {1e3 * each:7.2f} ms (median of {len(chosen)} batches of "
          f"{statistics.mean(len(idx) for idx in chosen):.0f} sentences on average)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
