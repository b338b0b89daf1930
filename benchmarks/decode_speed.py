"""Beam-search decoding speed with and without the decoder's key/value cache, side by side.

What it measures: `resrepro.evaluate.beam_search` (beam 4, length penalty alpha 0.6) on a
randomly initialised Transformer (default: the base configuration, d 512, 6+6 layers, vocabulary
8000) translating a fixed random batch (default 32 source sentences of 20 tokens, no padding).
The two modes:

- cache:    `decode_step` feeds one token per hypothesis and reuses the cached self-attention
            keys/values and cross-attention keys/values (source encoded once);
- no cache: every step re-runs the full teacher-forcing forward `model(src, prefix)` on all
            N * beam rows, encoder included (`use_cache=False`).

tokens/s = generated hypothesis tokens per second = sum over steps of the rows still decoding
(N * beam * steps when no sentence stops early). A random model rarely emits EOS, so decoding
normally runs to the maximum length, int(max_len_a * src_len + max_len_b) (default 0 * 20 + 20
= 20 steps); the output says how many steps ran and whether both modes found the same hypotheses.

How (the machine is shared and noisy): a fixed seed; one untimed warm-up decode per mode on two
sentences; then `--rounds` rounds, each timing one full decode per mode, the mode going first
alternating between rounds. The table gives the median (and min) time per decode and the median
tokens/s per mode, and the cache's speed-up (ratio of medians). Absolute numbers depend on the
load (printed in the header and footer); the ratio from one run is the number to quote.

Run (from the repository root):

    .venv/bin/python benchmarks/decode_speed.py
    .venv/bin/python benchmarks/decode_speed.py --batch 8 --src-len 30 --max-len-a 1 --max-len-b 10 --threads 2
    .venv/bin/python benchmarks/decode_speed.py --preset big --device cuda --rounds 5

At the defaults a round takes ~25 s on 2 CPU cores (the no-cache mode dominates: ~22 s against
~2 s with the cache), the whole run ~1.5 minutes; `--budget` (default 150 s) drops the last
rounds when a loaded machine makes them slower, and says so.
"""

from __future__ import annotations

import argparse
import datetime

import statistics
import platform
import sys
import time
from pathlib import Path

import torch

from resrepro.evaluate.beam_search import beam_search_nbest, max_lengths
from resrepro.models import count_parameters
from resrepro.models.transformer import PRESETS, Transformer, TransformerConfig

PAD, BOS, EOS = 0, 1, 2
MODES = (("cache", True), ("no cache", False))

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_time import add_run_options, device_text, load_text, setup_device  # noqa: E402  (shared helpers, same folder)

def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="base", choices=sorted(PRESETS), help="Transformer size (default base)")
    p.add_argument("--vocab", type=int, default=8000, help="vocabulary size (default 8000)")
    p.add_argument("--batch", type=int, default=32, help="source sentences decoded together (default 32)")
    p.add_argument("--src-len", type=int, default=20, help="source length in tokens (default 20)")
    p.add_argument("--beam", type=int, default=4, help="beam size (default 4)")
    p.add_argument("--alpha", type=float, default=0.6, help="length penalty alpha (default 0.6)")
    p.add_argument("--max-len-a", type=float, default=0.0, help="max length = a * src_len + b (default a = 0)")
    p.add_argument("--max-len-b", type=int, default=20, help="max length = a * src_len + b (default b = 20)")
    add_run_options(p, rounds=3)  # a round: one decode per mode
    a = p.parse_args(argv)
    for key in ("vocab", "batch", "src_len", "beam", "rounds"):
        if getattr(a, key) < 1:
            p.error(f"--{key.replace('_', '-')} must be >= 1")
    if a.vocab < 4:
        p.error("--vocab must be >= 4 (pad, bos, eos and one word)")
    return a

def main(argv=None) -> int:
    opts = parse_args(argv)
    device, sync = setup_device(opts)

    torch.manual_seed(opts.seed)
    cfg = TransformerConfig.preset(opts.preset, opts.vocab, pad_id=PAD)
    model = Transformer(cfg).to(device).eval()
    gen = torch.Generator().manual_seed(opts.seed)
    src = torch.randint(3, opts.vocab, (opts.batch, opts.src_len), generator=gen).to(device)
    max_len = max_lengths(model.source_lengths(src), opts.max_len_a, opts.max_len_b)[0]
    kw = dict(bos=BOS, eos=EOS, beam=opts.beam, alpha=opts.alpha, max_len_a=opts.max_len_a, max_len_b=opts.max_len_b)

    print(f"resrepro decode speed: beam search, beam {opts.beam}, alpha {opts.alpha:g}, with vs without the "
          f"key/value cache")
    print(f"date     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"torch    {torch.__version__} (python {platform.python_version()})")
    print(f"device   {device_text(device)}")
    print(f"threads  {torch.get_num_threads()}" + ("" if opts.threads is not None else " (torch default)")
          + load_text().replace(", load", "; load"))
    print(f"model    random {opts.preset} Transformer: d {cfg.d_model}, {cfg.encoder_layers}+{cfg.decoder_layers} "
          f"layers, ffn {cfg.ffn}, vocab {opts.vocab}, {count_parameters(model):,} parameters, fp32, eval mode")
    print(f"input    {opts.batch} sentences x {opts.src_len} tokens (random, no padding); max length "
          f"{opts.max_len_a:g} * {opts.src_len} + {opts.max_len_b} = {max_len} tokens; "
          f"{opts.batch} x {opts.beam} = {opts.batch * opts.beam} rows per step")
    print(f"method   seed {opts.seed}; 1 untimed warm-up decode per mode on 2 sentences, then {opts.rounds} rounds "
          f"x 1 decode per mode (first mode alternating); medians")
    print("note     a random model rarely emits EOS, so decoding runs (nearly) to the maximum length; "
          "'no cache' re-runs the full forward (encoder too) every step")
    sys.stdout.flush()

    t_start = time.perf_counter()
    for _, use_cache in MODES:  # warm-up: allocator, kernels, thread pool
        beam_search_nbest(model, src[:2], use_cache=use_cache, **{**kw, "max_len_b": min(opts.max_len_b, 3),
                                                                   "max_len_a": 0.0})
    sync()

    times: dict[str, list[float]] = {name: [] for name, _ in MODES}
    stats: dict[str, dict] = {}
    results: dict[str, list] = {}
    rounds_done = 0
    for r in range(opts.rounds):
        elapsed = time.perf_counter() - t_start
        if r > 0 and opts.budget > 0 and elapsed + elapsed / r > opts.budget:
            break  # the next round would overrun the budget (the warm-up is small)
        for name, use_cache in (MODES if r % 2 == 0 else MODES[::-1]):
            st: dict = {}
            sync()
            t0 = time.perf_counter()
            out = beam_search_nbest(model, src, use_cache=use_cache, stats=st, **kw)
            sync()
            times[name].append(time.perf_counter() - t0)
            stats[name], results[name] = st, out
        rounds_done += 1

    print()
    print(f"{'mode':<9}  {'median s':>9}  {'min s':>8}  {'steps':>5}  {'tokens':>7}  {'tokens/s':>9}  {'rounds':>6}")
    print(f"{'-' * 9}  {'-' * 9}  {'-' * 8}  {'-' * 5}  {'-' * 7}  {'-' * 9}  {'-' * 6}")
    median = {}
    for name, _ in MODES:
        med = median[name] = statistics.median(times[name])
        st = stats[name]
        tps = statistics.median(st["tokens"] / t for t in times[name])
        print(f"{name:<9}  {med:>9.3f}  {min(times[name]):>8.3f}  {st['steps']:>5}  {st['tokens']:>7}  "
              f"{tps:>9.1f}  {len(times[name]):>6}")
    print()
    print(f"speed-up with the cache: {median['no cache'] / median['cache']:.1f}x (ratio of median times)")
    full = opts.batch * opts.beam * max_len
    st = stats["cache"]
    ran_out = sum(1 for hyps in results["cache"] if len(hyps[0][1]) == max_len)
    if st["tokens"] == full:
        print(f"all {opts.batch} sentences decoded to the maximum length ({max_len} steps; tokens = "
              f"{opts.batch} x {opts.beam} x {max_len}); {ran_out} best hypotheses were cut off without EOS")
    else:
        print(f"some sentences stopped early: {st['tokens']} of {full} possible tokens in {st['steps']} steps; "
              f"{ran_out} best hypotheses were cut off without EOS")
    same = [[h for _, h in hyps] for hyps in results["cache"]] == [[h for _, h in hyps] for hyps in results["no cache"]]
    print(f"same hypotheses in both modes: {'yes' if same else 'NO (numerical near-ties?)'}")
    if rounds_done < opts.rounds:
        print(f"stopped after {rounds_done} of {opts.rounds} rounds: --budget {opts.budget:g} s reached")
    print(f"timed phase {time.perf_counter() - t_start:.1f} s (incl. warm-up){load_text()}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
