"""A training or evaluation job: a cell's seeds, each in <cell-dir>/seed<N>/ (layout.run_dir).

`run_job(a, setup)` runs them one after another in this process, side by side as processes
(--parallel), or stacked as one program (--stack, classification), and records what fails.
`setup(a)` prepares once per job and returns the function that does one seed: TRAINERS and
SCORERS hold one per task.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

from . import files, layout
from .specs import EvalSpec, TrainSpec


def on_sigterm(signum, frame):
    raise SystemExit("terminated by SIGTERM (a time limit, scancel or shutdown); the rerun resumes from the last checkpoint")


def job_name(a) -> str:
    """How messages and failure records name the job's command: `train translation`."""
    return f"{a.command} {a.task}"


def failure_record(error: str, command: str) -> dict:
    """What a seed's failed.json says: the report shows it beside the run."""
    return {"error": error, "command": command, "host": socket.gethostname(), "rank": int(os.environ.get("RANK", 0)),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def run_job(a, setup) -> None:
    """A job's seeds. A seed that fails leaves seed<N>/failed.json saying why (the aggregate shows it
    in the report), the next seeds still run, and the job then fails; when all succeed it writes the
    job's --done file last. Slurm's time limit sends SIGTERM: that is recorded too."""
    signal.signal(signal.SIGTERM, on_sigterm)
    if getattr(a, "minutes", 0) and a.stop_by is None:  # one deadline for the job, whichever process trains
        from .train.time_limit import deadline

        a.stop_by = deadline(a.minutes, time.time())
    if getattr(a, "stack", 0) and len(a.seeds) > 1:
        return run_seeds_stacked(a)
    if getattr(a, "parallel", 1) > 1 and len(a.seeds) > 1:
        return run_seeds_side_by_side(a)
    do_seed = setup(a)
    done, failed_seeds = {}, []
    for seed in a.seeds:
        run_dir = layout.run_dir(a.cell_dir, seed)
        failed = run_dir / "failed.json"
        started = time.time()
        try:
            done[f"seed{seed}"] = do_seed(seed, run_dir)
        except (Exception, SystemExit) as exc:
            if isinstance(exc, SystemExit) and exc.code in (0, None):
                raise
            if failed.exists() and failed.stat().st_mtime >= started:
                raise  # another rank of this job failed first (torchrun then terminates the rest): keep its reason
            files.write_json(failed, failure_record(str(exc) if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}",
                                                    job_name(a)))
            if isinstance(exc, SystemExit) or int(os.environ.get("WORLD_SIZE", 1)) > 1:
                raise  # terminated, or ranks that must stay in step: stop here
            traceback.print_exc()
            failed_seeds.append(seed)
            continue
        failed.unlink(missing_ok=True)
    if failed_seeds:
        sys.exit(f"{job_name(a)}: seed(s) {', '.join(map(str, failed_seeds))} of {a.cell_dir} failed (seed<N>/failed.json says why)")
    if int(os.environ.get("RANK", 0)) == 0:
        files.write_json(a.done, {"seeds": a.seeds, "runs": done})


def run_seeds_stacked(a) -> None:
    """A classification job's seeds trained stacked as one program on the job's device
    (train/stacked.py). They stand or fall together: when the program fails, each seed's
    failed.json says why, and the job fails; a seed that diverges is a result, as alone."""
    import torch

    from .train.stacked import train_stacked

    if a.parallel > 1:
        sys.exit(f"{job_name(a)}: --stack trains the job's seeds as one program; it cannot combine with --parallel {a.parallel}")
    if a.threads:
        torch.set_num_threads(a.threads)
    spec = TrainSpec.from_json(a.spec)
    run_dirs = [layout.run_dir(a.cell_dir, seed) for seed in a.seeds]
    try:
        metrics = train_stacked([spec.replace(seed=seed) for seed in a.seeds], a.data, run_dirs, device=a.device,
                                progress=not a.no_progress, stop_by=a.stop_by)
    except Exception as exc:
        traceback.print_exc()
        for run_dir in run_dirs:
            files.write_json(run_dir / "failed.json", {**failure_record(f"{type(exc).__name__}: {exc}", job_name(a)), "rank": 0})
        sys.exit(f"{job_name(a)}: the stacked seeds {', '.join(map(str, a.seeds))} of {a.cell_dir} failed (seed<N>/failed.json says why)")
    for run_dir in run_dirs:
        (run_dir / "failed.json").unlink(missing_ok=True)
    files.write_json(a.done, {"seeds": a.seeds, "runs": {f"seed{seed}": {"diverged": m["diverged"], "final": m["final"]}
                                                         for seed, m in zip(a.seeds, metrics)}})


def run_seeds_side_by_side(a) -> None:
    """A job's seeds as separate processes, at most `a.parallel` at a time, all on the job's device:
    small runs that cannot fill a GPU share it. Each is the same command for one seed (writing its
    own seed<N>/ and, on failure, failed.json); the job's --done file is written when all succeed."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        sys.exit(f"{job_name(a)}: --parallel runs seeds side by side on one device; it cannot combine with torchrun ranks")

    def one_seed(seed: int) -> tuple[int, Path]:
        done = layout.run_dir(a.cell_dir, seed) / "done.json"
        argv = [*a.command_line, "--seeds", str(seed), "--done", str(done), "--parallel", "1"]  # argparse: the last value wins
        if a.threads:  # the job's cores shared out: K processes of as many threads each would oversubscribe them
            argv += ["--threads", str(max(1, a.threads // a.parallel))]
        if a.stop_by is not None:
            argv += ["--stop-by", repr(a.stop_by)]
        return subprocess.run([sys.executable, "-m", "resrepro.cli", *argv]).returncode, done

    with ThreadPoolExecutor(max_workers=a.parallel) as pool:
        outcomes = dict(zip(a.seeds, pool.map(one_seed, a.seeds)))
    failed_seeds = [seed for seed, (code, _) in outcomes.items() if code != 0]
    if failed_seeds:
        sys.exit(f"{job_name(a)}: seed(s) {', '.join(map(str, failed_seeds))} of {a.cell_dir} failed (seed<N>/failed.json says why)")
    runs = {}
    for code, done in outcomes.values():
        runs |= json.loads(done.read_text())["runs"]
        done.unlink()
    files.write_json(a.done, {"seeds": a.seeds, "runs": runs})


# Training: one trainer per task, `train(spec, run_dir)` for one seed and the line that says how it ended.


def classification_trainer(a):
    from .train.classification import train

    def outcome(m: dict) -> str:
        return ("" if m["diverged"] else f"final test error {m['final']['test_error']:.2f}%") + f" after {m['epochs_completed']} epochs"

    return lambda spec, run_dir: train(spec, a.data, run_dir, device=a.device, progress=not a.no_progress, stop_by=a.stop_by), outcome


def sequence_outcome(m: dict) -> str:
    return ("" if m["diverged"] else f"dev loss {m['final']['dev_loss']:.3f}") + f" after {m['updates']} updates"


def translation_trainer(a):
    from .data.translation import load_encoded, load_prepared_meta
    from .train.translation import train

    vocab_size = load_prepared_meta(a.data)["subword"]["vocab_size"]
    train_pairs, dev_pairs = load_encoded(a.data, "train"), load_encoded(a.data, "dev")
    return (lambda spec, run_dir: train(spec, train_pairs, dev_pairs, vocab_size, run_dir, device=a.device,
                                        progress=not a.no_progress, stop_by=a.stop_by)), sequence_outcome


def captioning_trainer(a):
    from .train.captioning import train

    def outcome(m: dict) -> str:
        scst = m.get("scst")
        return sequence_outcome(m) + (f", then {scst['updates']} self-critical (dev CIDEr-D {scst['final']['dev_cider']:.3f})"
                                      if scst and scst["final"] else "")

    return lambda spec, run_dir: train(spec, a.data, run_dir, device=a.device, progress=not a.no_progress, stop_by=a.stop_by), outcome


TRAINERS = {"classification": classification_trainer, "translation": translation_trainer, "captioning": captioning_trainer}


def training(a):
    """A training job's per-seed function (its task's trainer); the job's threads set once."""
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    spec = TrainSpec.from_json(a.spec)
    if spec.task != a.task:
        sys.exit(f"{job_name(a)}: its --spec is a {spec.task} spec")
    train_one, outcome = TRAINERS[a.task](a)

    def train_seed(seed: int, run_dir: Path) -> dict:
        metrics = train_one(spec.replace(seed=seed), run_dir)
        print(f"{run_dir}: {'diverged' if metrics['diverged'] else ''}{outcome(metrics)}", file=sys.stderr)
        return {"diverged": metrics["diverged"], "final": metrics["final"]}

    return train_seed


# Evaluation (translation and captioning; classification is evaluated every epoch by its training):
# one scorer per task, `score(averaged, run_dir)` -> (what the job records, the line that says it).


def translation_scorer(a, spec: EvalSpec):
    from .evaluate.translation import evaluate_prepared

    def score(averaged: Path, run_dir: Path) -> tuple[dict, str]:
        losses = averaging_dev_losses(averaged, a.data, run_dir, spec, a.device)
        result = evaluate_prepared(spec, a.data, averaged, run_dir, device=a.device, also=losses)
        bleu, sacre = result["bleu_tokenized"]["bleu"], result["sacrebleu"]["bleu"]
        return {"bleu_tokenized": bleu, "sacrebleu": sacre, **losses}, (
            f"BLEU {bleu:.2f} tokenized, {sacre:.2f} sacreBLEU; dev loss {losses['dev_loss_averaged']:.3f} averaged, "
            f"{losses['dev_loss_last']:.3f} at the last checkpoint")

    return score


def averaging_dev_losses(averaged: Path, data_dir: str | Path, run_dir: Path, spec: EvalSpec, device: str) -> dict:
    """The dev loss of the averaged model, on the dev examples and with the loss training computed
    at each checkpoint, beside the last checkpoint's (metrics.json): what averaging did to the model."""
    from .data.translation import load_encoded
    from .devices import pick_device
    from .evaluate.translation import load_model
    from .specs import TranslationTrainSpec
    from .speed import speed_of
    from .train.translation import dev_examples, dev_loss

    metrics = json.loads((run_dir / "metrics.json").read_text())
    train_spec = TranslationTrainSpec.of(metrics["spec"])
    dev = pick_device(device)
    model = load_model(averaged, spec, dev)
    loss = dev_loss(model, dev_examples(load_encoded(data_dir, "dev"), train_spec), train_spec, dev, speed_of(train_spec, dev))
    return {"dev_loss_averaged": loss, "dev_loss_last": metrics["final"]["dev_loss"]}


def captioning_scorer(a, spec: EvalSpec):
    from .evaluate.captioning import Scorers, evaluate_prepared

    scorers = Scorers(java=a.java)  # once per job: METEOR's Java process serves every seed

    def score(averaged: Path, run_dir: Path) -> tuple[dict, str]:
        result = evaluate_prepared(spec, a.data, averaged, run_dir, scorers, device=a.device)
        spice = "SPICE unavailable" if result["spice"] is None else f"SPICE {result['spice']:.1f}"
        return ({"cider": result["cider"], "bleu4": result["bleu4"], "spice": result["spice"]},
                f"CIDEr {result['cider']:.1f}, BLEU-4 {result['bleu4']:.1f}, {spice}")

    return score


SCORERS = {"translation": translation_scorer, "captioning": captioning_scorer}


def average_newest(checkpoints: Path, last: int, out: Path) -> None:
    """Average the `last` newest step checkpoints into `out`, and say which. Each must come from the
    run that wrote last.pt, where there is one."""
    from .train.average import average_checkpoints, checkpoints_to_average, run_id_of

    resume_point = checkpoints / "last.pt"
    run_id = run_id_of(resume_point) if resume_point.exists() else None
    summary = average_checkpoints(checkpoints_to_average(checkpoints, last), out, run_id)
    print(f"averaged {summary['n']} checkpoints ({', '.join(summary['files'])}) -> {out}", file=sys.stderr)


def evaluation(a):
    """An evaluation job's per-seed function: average the seed's last checkpoints, score them with its
    task's scorer. A run that diverged in training is not evaluated: its averaged weights hold NaN,
    and the report shows it as diverged, not a score (analysis/aggregate.read_run)."""
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    spec = EvalSpec.from_json(a.spec)
    score = SCORERS[a.task](a, spec)

    def evaluate_seed(seed: int, run_dir: Path) -> dict:
        metrics = json.loads((run_dir / "metrics.json").read_text())
        if metrics["diverged"]:
            print(f"{run_dir}: diverged in training at update {metrics['diverged_at']['step']}: not evaluated", file=sys.stderr)
            return {"diverged": True}
        averaged = run_dir / "averaged.pt"
        average_newest(run_dir / "checkpoints", spec.average_last, averaged)
        summary, line = score(averaged, run_dir)
        print(f"{run_dir}: {line}", file=sys.stderr)
        return summary

    return evaluate_seed
