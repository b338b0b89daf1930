"""Test error (or BLEU) and training time of candidate mini-scale recipes, side by side.

The mini scale's recipe is chosen by measurement: as few images seen as possible while the test
errors stay where the longer recipe puts them (and the catastrophic rows stay catastrophic). For
each recipe this trains a few cells of the mini tables on digits (PreAct-ResNet-32 with add,
xSkip+LN, LN(x + 3F) and SAS, PreAct-ResNet-8 with add), in this one process on one thread, and
prints each run's final test error, its training-loop seconds and the recipe's mean.

    .venv/bin/python benchmarks/mini_recipe.py [--seeds 2 --threads 1 --recipes JSON ...]
    .venv/bin/python benchmarks/mini_recipe.py --task translation [--corpus JSON] [--recipes JSON ...]

Translation trains mini's translation cells that tell the variants apart (mini_base with
LN(x + F), x + F and 2rSkip+LN, mini_big with LN(x + F)) on the synthetic corpus, averages the
last checkpoints, decodes the test set and prints tokenized BLEU. --corpus changes the corpus
(prepare_synthetic's n_train / vocab_size, and max_source_tokens: the longest source sentence);
--models JSON changes the mini presets, e.g. '{"mini_big": {"d_model": 96}}'.

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
TRANSLATION_CELLS = [("base", "xskip_ln", {"lam": 1}), ("base", "add", {}), ("base", "rskip_ln", {"lam": 2}),
                     ("big", "xskip_ln", {"lam": 1})]
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
    p.add_argument("--task", choices=["classification", "translation"], default="classification")
    p.add_argument("--corpus", default="{}", help="translation: JSON changes to the synthetic corpus")
    p.add_argument("--models", default="{}", help="translation: JSON changes to the mini model presets")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.task == "translation":
        if a.recipes == DEFAULT_RECIPES:
            a.recipes = ["{}"]
        return translation(a)
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
                print_cell(text, f"{variant}{args or ''} depth {depth}", mine, seconds[-a.seeds:])
            print_cell(text, "mean", [statistics.mean(errors)], seconds)
    return 0


def print_cell(recipe: str, cell: str, scores: list[float], seconds: list[float]) -> None:
    """One line: the recipe, the cell, its score per seed (or the recipe's mean) and its mean loop seconds."""
    print(f"{recipe:58s} {cell:28s} {' '.join(f'{v:5.1f}' for v in scores):>24s} {statistics.mean(seconds):7.1f}", flush=True)


def translation(a) -> int:
    from resrepro import experiments
    from resrepro.data import synthetic_translation
    from resrepro.data.translation import load_encoded, load_prepared_meta, prepare_synthetic
    from resrepro.evaluate.translation import evaluate_prepared
    from resrepro.models import transformer
    from resrepro.train.average import average_checkpoints, checkpoints_to_average
    from resrepro.train.translation import train

    corpus = json.loads(a.corpus)
    if "max_source_tokens" in corpus:  # a probe of other sentence lengths: the generator's bound, this process only
        synthetic_translation.MAX_TOKENS = corpus.pop("max_source_tokens")
    for name, change in json.loads(a.models).items():
        transformer.PRESETS[name] = {**transformer.PRESETS[name], **change}
    mini = yaml.safe_load((REPO / "config" / "mini.yaml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        prepare_synthetic(data, seed=0, **corpus)
        meta = load_prepared_meta(data)
        train_pairs, dev_pairs = load_encoded(data, "train"), load_encoded(data, "dev")
        print(f"corpus {a.corpus}, models {a.models}: vocabulary {meta['subword']['vocab_size']}")
        print(f"{'recipe':58s} {'cell':28s} {'BLEU per seed':>24s} {'loop s':>7s}")
        for text in a.recipes:
            cfg = {**mini, "tables": ["rskip-t2", "rskip-t7"], "figures": [],
                   "translation": {**mini["translation"], **json.loads(text)}}
            plan = experiments.make_plan(cfg)
            bleus, seconds = [], []
            for size, variant, args in TRANSLATION_CELLS:
                mine = []
                for seed in range(a.seeds):
                    run = next(r for r in plan.runs.values() if r.size == mini["translation"]["sizes"][size]
                               and r.variant == variant and json.loads(r.args_json) == args and r.seed == seed)
                    out = Path(tmp) / run.path
                    m = train(experiments.train_spec(cfg, run), train_pairs, dev_pairs, meta["subword"]["vocab_size"], out,
                              device="cpu", progress=False)
                    spec = experiments.eval_spec(run)
                    average_checkpoints(checkpoints_to_average(out / "checkpoints", spec.average_last), out / "averaged.pt")
                    mine.append(evaluate_prepared(spec, data, out / "averaged.pt", out, device="cpu")["bleu_tokenized"]["bleu"])
                    seconds.append(m["wall_time_s"])
                bleus.append(statistics.mean(mine))
                print_cell(text, f"{size} {variant}{args or ''}", mine, seconds[-a.seeds:])
            print_cell(text, "mean", [statistics.mean(bleus)], seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
