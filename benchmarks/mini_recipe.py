"""Test error and training time of candidate mini-scale classification recipes, side by side.

The mini scale's recipe is chosen by measurement: as few images seen as possible while the test
errors stay where the longer recipe puts them (and the catastrophic rows stay catastrophic). For
each recipe this trains a few cells of the mini tables on digits (PreAct-ResNet-32 with add,
xSkip+LN, LN(x + 3F) and SAS, PreAct-ResNet-8 with add), in this one process on one thread, and
prints each run's final test error, its training-loop seconds and the recipe's mean.

    .venv/bin/python benchmarks/mini_recipe.py [--seeds 2 --threads 1 --recipes JSON ...]

A recipe is JSON over config/mini.yaml's classification block ('{}': mini's own), e.g.
'{"batch_size": 128, "epochs": 12, "lr_milestones": [6, 9]}' (the default compares that one,
mini's recipe before issue 11, with mini's). About 2-4 minutes per recipe on 2 CPU cores.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
CELLS = [(32, "add", {}), (32, "xskip_ln", {}), (32, "ln_scale_f", {"k": 3}), (32, "sas", {}), (8, "add", {})]
# mini's recipe before issue 11 (12 epochs of batch 128), then mini's recipe as it is
DEFAULT_RECIPES = ['{"batch_size": 128, "epochs": 12, "lr_milestones": [6, 9]}', '{}']


def main(argv=None) -> int:
    from resrepro.data.digits import prepare_digits
    from resrepro.recipes import SCALE_KEYS
    from resrepro.train.classification import train

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipes", nargs="+", default=DEFAULT_RECIPES, help="JSON changes to mini's classification recipe")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    mini = yaml.safe_load((REPO / "config" / "mini.yaml").read_text())["classification"]
    base = {k: v for k, v in mini.items() if k not in SCALE_KEYS}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "digits.pt"
        prepare_digits(data)
        print(f"{'recipe':58s} {'cell':28s} {'test error % per seed':>24s} {'loop s':>7s}")
        for text in a.recipes:
            recipe = {**base, **json.loads(text)}
            errors, seconds = [], []
            for depth, variant, args in CELLS:
                mine = []
                for seed in range(a.seeds):
                    spec = {**recipe, "task": "classification", "dataset": "digits", "model": "preact_resnet", "depth": depth,
                            "arch": f"preact_resnet{depth}", "variant": variant, "args": args, "seed": seed}
                    m = train(spec, data, Path(tmp) / "run", device="cpu", progress=False)
                    for f in (Path(tmp) / "run").rglob("*"):  # the next run starts afresh
                        f.unlink() if f.is_file() else None
                    mine.append(m["final"]["test_error"] if m["final"] else float("nan"))
                    seconds.append(m["wall_time_s"])
                errors.append(statistics.mean(mine))
                cell = f"{variant}{args or ''} depth {depth}"
                print(f"{text:58s} {cell:28s} {' '.join(f'{e:5.1f}' for e in mine):>24s} {statistics.mean(seconds[-a.seeds:]):7.1f}",
                      flush=True)
            print(f"{text:58s} {'mean':28s} {statistics.mean(errors):24.1f} {statistics.mean(seconds):7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
