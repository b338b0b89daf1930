"""Runs on disk without training: the real plan of the tiny config over tests/fixtures/config (the
papers' tables, figures and claims and the scales as a commit had them), metrics files written by
hand."""

from __future__ import annotations

from pathlib import Path

import yaml

from resrepro import experiments, files


CONFIG = "tests/fixtures/config"
TABLES, FIGURES, CLAIMS = f"{CONFIG}/tables", f"{CONFIG}/figures", f"{CONFIG}/claims.yaml"
FIXTURE_DATA = {"tables_dir": TABLES, "figures_dir": FIGURES, "claims": CLAIMS}


def tiny_config() -> dict:
    """tests/configs/tiny.yaml (the integration tests' config) over the fixture tables, figures and claims."""
    with open("tests/configs/tiny.yaml") as f:
        return yaml.safe_load(f) | FIXTURE_DATA


def tiny_config_file(folder) -> str:
    """tiny_config() as a file in `folder`, for the commands that read a config's path."""
    path = Path(folder) / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_config(), sort_keys=False))
    return str(path)


def config_for(tables: list[str], seeds: int = 3, scale: str = "tiny", config_dir: str = CONFIG) -> dict:
    """The config of these tables at a scale (tiny: tiny_config(); else <config_dir>/<scale>.yaml,
    config_dir "config" for the tests of the project's own scales), at `seeds` seeds everywhere,
    without figures (whose cells would add runs that no table names)."""
    if scale == "tiny":
        config = tiny_config()
    else:
        with open(f"{config_dir}/{scale}.yaml") as f:
            config = yaml.safe_load(f)
    config |= {"tables": tables, "seeds": seeds, "figures": [], "table_seeds": {}}
    config["translation"] = config["translation"] | {"seeds": seeds}
    config["captioning"] = config["captioning"] | {"seeds": seeds}
    return config


def plan_for(tables: list[str], seeds: int = 3) -> experiments.Plan:
    """The plan the workflow would make for these tables of the tiny config (config_for)."""
    return experiments.make_plan(config_for(tables, seeds))


def write_metrics(results, run: str, test_error: float | None, best: tuple[float, int] | None = None, train_log: bool = False,
                  train_error: float | None = None, train_loss: float | None = None) -> None:
    """A classification run's metrics.json as train() writes it; None: diverged. `best`: (test
    error, epoch) of the best epoch, by default the final one (epoch 2). `train_log`: also its
    2-epoch train_log.csv, for the learning curves. `train_error`: the last epoch's, by default
    half the test error; `train_loss`: the last epoch's, by default a hundredth of the test error
    (the best epoch's: twice that)."""
    m = {"diverged": test_error is None, "epochs_completed": 2, "wall_time_s": 1.0, "parameters": 10, "spec": {"epochs": 2},
         "provenance": {"device": "cpu", "git_commit": "abc"}}
    if test_error is None:
        m.update(final=None, best=None, diverged_at={"epoch": 1, "step": 3, "loss": "nan"})
    else:
        best_error, best_epoch = best or (test_error, 2)
        loss = test_error / 100 if train_loss is None else train_loss
        m.update(final={"test_error": test_error, "train_error": test_error / 2 if train_error is None else train_error, "train_loss": loss},
                 best={"test_error": best_error, "epoch": best_epoch, "train_loss": 2 * loss})
    files.write_json(results / run / "metrics.json", m)
    if train_log:
        last = "nan" if test_error is None else test_error
        files.write_text(results / run / "train_log.csv", f"epoch,train_loss,test_error\n1,1.0,50\n2,0.5,{last}\n")


def write_translation_run(results, run: str, bleu: float, sacrebleu: float, hyps: list[str], refs: list[str],
                          dev_losses: tuple[float, float] = (1.25, 1.27)) -> None:
    """A trained and evaluated translation run: metrics.json, eval.json (with the dev loss of the
    averaged model and of the last checkpoint, `dev_losses`) and the detokenized texts."""
    from resrepro.evaluate.bleu import write_lines

    files.write_json(results / run / "metrics.json", {"diverged": False, "updates": 20, "wall_time_s": 2.0, "parameters": 10,
                                                      "spec": {"max_updates": 20}, "provenance": {"device": "cpu", "git_commit": "abc"}})
    files.write_json(results / run / "eval.json", {"bleu_tokenized": {"bleu": bleu, "tokenization": "the synthetic corpus's own tokens"}, "sacrebleu": {"bleu": sacrebleu, "signature": "sig"},
                                                   "test_sentences": len(hyps), "test_split_sentences": len(hyps),
                                                   "dev_loss_averaged": dev_losses[0], "dev_loss_last": dev_losses[1]})
    write_lines(results / run / "hyp.detok.txt", hyps)
    write_lines(results / run / "ref.detok.txt", refs)


def write_captioning_run(results, run: str, scores: dict, spice_note: str = "") -> None:
    """A trained and evaluated captioning run: metrics.json and eval.json (the COCO metrics x 100;
    SPICE None with its note where it could not run)."""
    files.write_json(results / run / "metrics.json", {"diverged": False, "updates": 20, "wall_time_s": 2.0, "parameters": 10,
                                                      "spec": {"max_updates": 20, "scst": {"updates": 5}}, "provenance": {"device": "cpu", "git_commit": "abc"}})
    samples = [{"image": f"test{i}", "thumbnail": f"data:image/png;base64,{i}", "reference": f"a shape {i}", "caption": f"{run} saw {i}"}
               for i in range(2)]
    files.write_json(results / run / "eval.json", {**scores, "spice_note": spice_note, "features": "patch_grid", "images": 5,
                                                   "samples": samples})
