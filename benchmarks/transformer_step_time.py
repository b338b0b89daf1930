"""Transformer training step time of every sequence-layout residual variant, relative to the
papers' post-LN baseline `xskip_ln` (lam 1), measured side by side.

The translation track's counterpart of `step_time.py`. What it measures: one training step of a
randomly initialised encoder-decoder `resrepro.models.transformer.Transformer` on a fixed random
batch = forward with teacher forcing, label-smoothed cross-entropy (0.1, `label_smoothed_loss`),
backward and an Adam step (betas 0.9/0.98, eps 1e-9, as `train/translation.py`; the learning rate
is a constant 1e-4, which does not change the time). Variants: the papers' rows (xskip_ln lam 1 =
post-LN LN(x + F), the baseline; add = 1xSkip without a norm; xskip_ln lam 2; rskip_ln lam 2 and
3; ln_scale_f k 2; wskip_ln; sas with zero gate biases; sas with single-layer gates; highway;
plain) plus every other registered name with its default args, so a new variant shows up without
editing this file. Names ending in `_bn` are conv-only and left out; a variant that still cannot
be built for the (N, T, D) layout is listed as skipped.

Default model: preset `base_2block` (d 512, 8 heads, ffn 2048, dropout 0.1, 2 encoder + 2
decoder layers; paper 001's two-block model), vocabulary 8000, batch 16 sentences x 25 source and
25 target tokens (random ids, no padding). The full 6+6-layer `base` takes ~4-18 s per step on 2
loaded CPU cores (~13 variants would need ~15 minutes); `base_2block` keeps base's width, so
each layer's residual-vs-sublayer cost is the same, but embedding, softmax and optimizer are a
larger share of the step than with 6+6 layers, which pulls the ratios towards 1.
`--preset base` (or `--encoder-layers/--decoder-layers`) measures other sizes.

How (the machine is shared and noisy): a fixed seed; every variant gets its own model and Adam
optimizer, built once, in train mode (dropout on); each takes `--warmup` untimed steps; then the
variants are interleaved in `--rounds` round-robin rounds (the starting variant rotates each
round), each variant timing `--steps` single steps per round. The table gives per variant the
median step time in ms and its ratio to the baseline's median, the minimum step time and its
ratio to the baseline's minimum, the parameter count, the number of timed steps and the loss of
the last step (a non-finite loss is flagged: NaN/inf arithmetic can change the time). Only ratios
from the same run are comparable; absolute times depend on the load. When other jobs share the
cores (the header and footer print the load average), the medians swing and the min ratio is the
steadier estimate. The speed switches are step_time.py's: on CUDA the default is bf16 autocast, a
fused Adam and TF32 matmuls, as training uses there; `--compile` compiles every model, as a
recipe's `compile`. The `ops`, `GFLOP` and `FLOP vs` columns are step_time.py's: at base width
a CPU step is compute-bound, so a variant's time ratio follows its FLOP ratio, and SAS's gates
(two 2h x h layers per residual, per token) set both.

Run (from the repository root):

    .venv/bin/python benchmarks/transformer_step_time.py
    .venv/bin/python benchmarks/transformer_step_time.py --threads 2 --csv benchmarks/transformer_step_time.csv
    .venv/bin/python benchmarks/transformer_step_time.py --preset base --device cuda --rounds 10 --steps 5

At the defaults (5 rounds x 1 step after 1 warm-up step, 13 variants) it takes ~1.5-3 minutes on
2 CPU cores (a step is ~1-2 s there, more when other jobs run); `--budget` (default 150 s) drops
the last rounds when a loaded machine makes steps slower, and says so.
"""

from __future__ import annotations

import argparse
import datetime
import math
import platform
import sys
import time
from pathlib import Path

import torch

from resrepro import residual
from resrepro.models import count_parameters
from resrepro.models.transformer import PRESETS, Transformer, TransformerConfig, label_smoothed_loss
from resrepro.speed import Speed

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_time import (add_run_options, chosen, count_ops, device_text, load_text, report_timings,  # noqa: E402  (shared helpers, same folder)
                       setup_device, speed_from, speed_text, time_interleaved)

PAD, BOS = 0, 1
BASELINE: tuple[str, dict] = ("xskip_ln", {"lam": 1})

# (name, args) in table order, baseline first; the registry's remaining non-_bn names are
# appended with default args.
PAPER_VARIANTS: list[tuple[str, dict]] = [
    BASELINE,
    ("add", {}),
    ("xskip_ln", {"lam": 2}),
    ("rskip_ln", {"lam": 2}),
    ("rskip_ln", {"lam": 3}),
    ("ln_scale_f", {"k": 2}),
    ("wskip_ln", {}),
    ("sas", {"bias_a": 0, "bias_b": 0}),
    ("sas", {"gate": "single"}),
    ("highway", {}),
    ("plain", {}),
]


def variants() -> list[tuple[str, dict]]:
    """The paper rows that exist in the registry, then every other sequence-layout name (defaults)."""
    rows = [(n, a) for n, a in PAPER_VARIANTS if n in residual.REGISTRY]
    listed = {n for n, _ in rows}
    rows += [(n, {}) for n in residual.REGISTRY if n not in listed and not n.endswith("_bn")]
    return rows


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="base_2block", choices=sorted(PRESETS),
                   help="Transformer size (default base_2block: base's width with 2+2 layers)")
    p.add_argument("--encoder-layers", type=int, default=None, help="override the preset's encoder layers")
    p.add_argument("--decoder-layers", type=int, default=None, help="override the preset's decoder layers")
    p.add_argument("--vocab", type=int, default=8000, help="joint vocabulary size (default 8000)")
    p.add_argument("--batch", type=int, default=16, help="sentences per batch (default 16)")
    p.add_argument("--src-len", type=int, default=25, help="source tokens per sentence (default 25)")
    p.add_argument("--tgt-len", type=int, default=25, help="target tokens per sentence (default 25)")
    add_run_options(p, rounds=5, steps=1)
    a = p.parse_args(argv)
    for key in ("rounds", "steps", "batch", "src_len", "tgt_len"):
        if getattr(a, key) < 1:
            p.error(f"--{key.replace('_', '-')} must be >= 1")
    for key in ("encoder_layers", "decoder_layers"):
        if getattr(a, key) is not None and getattr(a, key) < 1:
            p.error(f"--{key.replace('_', '-')} must be >= 1")
    if a.vocab < 4:
        p.error("--vocab must be >= 4 (pad, bos, eos and one word)")
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    return a


def model_config(opts: argparse.Namespace, name: str, args: dict) -> TransformerConfig:
    overrides = {k: getattr(opts, k) for k in ("encoder_layers", "decoder_layers") if getattr(opts, k) is not None}
    max_positions = max(1024, opts.src_len, opts.tgt_len)
    return TransformerConfig.preset(opts.preset, opts.vocab, variant=name, args=args, pad_id=PAD,
                                    max_positions=max_positions, **overrides)


class Bench:
    """One variant's model, optimizer, timings and last loss."""

    def __init__(self, name: str, args: dict, opts: argparse.Namespace, speed: Speed, device: torch.device):
        self.label = residual.variant_id(name, args)
        torch.manual_seed(opts.seed)
        self.model = Transformer(model_config(opts, name, args)).to(device).train()
        self.net = speed.compiled(self.model)  # what the step calls, as in training
        self.params = count_parameters(self.model)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, **speed.optimizer_options())
        self.times: list[float] = []
        self.ops: int | None = None  # count_ops
        self.flops = 0  # count_ops
        self.loss: torch.Tensor | None = None


def step(b: Bench, src, tgt_in, tgt_out, speed: Speed) -> None:
    b.opt.zero_grad(set_to_none=True)
    with speed.autocast(src.device):
        logits = b.net(src, tgt_in)
    loss = label_smoothed_loss(logits, tgt_out, PAD, 0.1)  # fp32 loss, as in training
    loss.backward()
    b.opt.step()
    b.loss = loss.detach()


def main(argv=None) -> int:
    opts = parse_args(argv)
    device, sync = setup_device(opts)
    speed = speed_from(opts, device)

    gen = torch.Generator().manual_seed(opts.seed)
    src = torch.randint(3, opts.vocab, (opts.batch, opts.src_len), generator=gen).to(device)
    tgt = torch.randint(3, opts.vocab, (opts.batch, opts.tgt_len), generator=gen)
    tgt_in = torch.cat([torch.full((opts.batch, 1), BOS), tgt[:, :-1]], dim=1).to(device)  # teacher forcing
    tgt_out = tgt.to(device)

    benches, skipped = [], []
    for n, a in chosen(variants(), opts.variants, BASELINE):
        try:
            benches.append(Bench(n, a, opts, speed, device))
        except residual.ConfigError as err:  # e.g. a variant only defined for the conv layout
            skipped.append(f"{residual.variant_id(n, a)} ({err})")
    ref = benches[0]  # the baseline, xskip_ln lam 1
    cfg = ref.model.cfg
    t_start = time.perf_counter()

    print(f"resrepro Transformer step time: every residual variant vs the post-LN baseline {ref.label} (lam 1); "
          "one step = forward (teacher forcing) + label-smoothed cross-entropy (0.1) + backward + Adam step")
    print(f"date     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"torch    {torch.__version__} (python {platform.python_version()})")
    print(f"device   {device_text(device)}")
    print(f"threads  {torch.get_num_threads()}" + ("" if opts.threads is not None else " (torch default)")
          + load_text().replace(", load", "; load"))
    layers = "" if opts.encoder_layers is None and opts.decoder_layers is None else " (layers overridden)"
    print(f"model    random {opts.preset} Transformer{layers}: d {cfg.d_model}, {cfg.heads} heads, "
          f"{cfg.encoder_layers}+{cfg.decoder_layers} layers, ffn {cfg.ffn}, dropout {cfg.dropout:g}, "
          f"vocab {opts.vocab}, train mode"
          + (" (the 6+6 base is too slow for this run on 2 CPU cores)" if opts.preset == "base_2block" else ""))
    print(f"input    {opts.batch} sentences x {opts.src_len} source + {opts.tgt_len} target tokens "
          f"(random ids, no padding); Adam betas 0.9/0.98, eps 1e-9")
    print(f"speed    {speed_text(speed)}")
    print(f"method   seed {opts.seed}, {opts.warmup} warm-up step(s) per variant, then {opts.rounds} round-robin "
          f"rounds x {opts.steps} step(s) per variant; median of the timed steps")
    sys.stdout.flush()

    count_ops(benches, lambda b: step(b, src, tgt_in, tgt_out, speed), speed)
    rounds_done = time_interleaved(benches, lambda b: step(b, src, tgt_in, tgt_out, speed), sync, opts, t_start)

    rows = report_timings(benches, ref, rounds_done, opts, t_start, with_loss=True)
    bad = [r["variant"] for r in rows if not math.isfinite(r["last_loss"])]
    if bad:
        print(f"\nnon-finite loss (NaN/inf arithmetic may distort the time): {', '.join(bad)}")
    if skipped:
        print(f"\nskipped (cannot be built for the sequence layout): {'; '.join(skipped)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
