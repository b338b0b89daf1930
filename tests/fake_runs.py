"""Runs on disk without training: the real plan of the tiny config, metrics files written by hand."""

from __future__ import annotations

import yaml

from resrepro import experiments, files


def plan_for(tables: list[str], seeds: int = 3) -> experiments.Plan:
    """The plan the workflow would make for these tables of the tiny config, at `seeds` seeds."""
    with open("tests/configs/tiny.yaml") as f:
        config = yaml.safe_load(f)
    config |= {"tables": tables, "seeds": seeds}
    config["translation"] = config["translation"] | {"seeds": seeds}
    return experiments.make_plan(config)


def write_metrics(results, run: str, test_error: float | None) -> None:
    """A classification run's metrics.json as train() writes it (final = best epoch); None: diverged."""
    m = {"diverged": test_error is None, "epochs_completed": 2, "wall_time_s": 1.0, "parameters": 10,
         "provenance": {"device": "cpu", "git_commit": "abc"}}
    if test_error is None:
        m.update(final=None, best=None, diverged_at={"epoch": 1, "step": 3, "loss": "nan"})
    else:
        m.update(final={"test_error": test_error}, best={"test_error": test_error, "epoch": 2})
    files.write_json(results / run / "metrics.json", m)


def write_translation_run(results, run: str, bleu: float, sacrebleu: float, hyps: list[str], refs: list[str]) -> None:
    """A trained and evaluated translation run: metrics.json, eval.json and the detokenized texts."""
    from resrepro.evaluate.bleu import write_lines

    files.write_json(results / run / "metrics.json", {"diverged": False, "updates": 20, "wall_time_s": 2.0, "parameters": 10,
                                                      "provenance": {"device": "cpu", "git_commit": "abc"}})
    files.write_json(results / run / "eval.json", {"bleu_tokenized": {"bleu": bleu}, "sacrebleu": {"bleu": sacrebleu, "signature": "sig"}})
    write_lines(results / run / "hyp.detok.txt", hyps)
    write_lines(results / run / "ref.detok.txt", refs)
