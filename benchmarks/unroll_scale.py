"""Paper 003's unrolled last block (iter-f7, iter-f20) at each scale s of its extra steps: for a
trained run's seeds, the training loss before and after the 20 extra steps (and its lowest on the
way), and the held-out accuracy, so that a reader can see what s does to the net the figures read.

    .venv/bin/python benchmarks/unroll_scale.py results/mini/classification/digits/preact_resnet32/iter-init/add [--data results/data/digits.pt]

The figures keep s fixed (config/figures/iter.yaml): choosing it on this training loss would decide
iter-f7's first check (the training loss falls over the steps) by construction.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from resrepro import models
from resrepro.data.images import load_prepared
from resrepro.measure import get

SCALES = (1.0, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cell", help="a cell's folder (its seed<N>/ runs)")
    parser.add_argument("--data", default="results/data/digits.pt")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    data = load_prepared(args.data)
    unroll = get("unroll")
    print("| s | seed | training loss, as trained -> after the steps (lowest) | held-out accuracy (%) |\n|---|---|---|---|")
    for scale in SCALES:
        for run in sorted(p for p in Path(args.cell).glob("seed[0-9]*") if (p / "checkpoints" / "last.pt").exists()):
            model = models.from_checkpoint(models.load_checkpoint(run / "checkpoints" / "last.pt")).eval()
            frame = unroll.measure(model, data, {**unroll.defaults, "steps": args.steps, "scale": scale, "margin": 0.1,
                                                 "splits": ["train", "test"]}, torch.device("cpu"))
            curve = lambda split, quantity: frame[(frame.split == split) & (frame.group == "all") & (frame.quantity == quantity)].sort_values("step")["value"]  # noqa: E731
            loss, accuracy = curve("train", "loss"), curve("test", "accuracy (%)")
            print(f"| {scale:g} | {run.name.removeprefix('seed')} | {loss.iloc[0]:.4f} -> {loss.iloc[-1]:.4f} ({loss.min():.4f}) | "
                  f"{accuracy.iloc[0]:.1f} -> {accuracy.iloc[-1]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
