"""`resrepro <command>`: the one command each Snakemake rule calls. Thin: parse, call the package."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .heap import keep_freed_memory


def cmd_download(a) -> None:
    from .data import cifar, download

    source = cifar.SOURCES[a.dataset]
    download.fetch(a.url or source["url"], a.out, json.loads(a.md5).get(source["filename"], source["md5"]))


def cmd_prepare(a) -> None:
    if a.dataset == "digits":
        from .data.digits import prepare_digits

        prepare_digits(a.out)
    else:
        from .data.cifar import prepare_cifar

        if not a.archive:
            sys.exit(f"prepare {a.dataset}: --archive is required")
        prepare_cifar(a.archive, a.dataset, a.out)


def seed_trainer(a, train_one, outcome):
    """A training command's per-seed function: `train_one(spec, run_dir)` trains one seed's run,
    `outcome(metrics)` says how it ended (after "diverged" or not); the job's threads set once."""
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    spec = json.loads(a.spec)

    def train_seed(seed: int, run_dir: Path) -> dict:
        metrics = train_one({**spec, "seed": seed}, run_dir)
        print(f"{run_dir}: {'diverged' if metrics['diverged'] else ''}{outcome(metrics)}", file=sys.stderr)
        return {"diverged": metrics["diverged"], "final": metrics["final"]}

    return train_seed


def cmd_train(a) -> None:
    from .train.classification import train

    return seed_trainer(a, lambda spec, run_dir: train(spec, a.data, run_dir, device=a.device, progress=not a.no_progress,
                                                       stop_by=a.stop_by),
                        lambda m: ("" if m["diverged"] else f"final test error {m['final']['test_error']:.2f}%")
                        + f" after {m['epochs_completed']} epochs")


def cmd_aggregate(a) -> None:
    from . import files
    from .analysis.aggregate import aggregate, aggregate_figures

    plan = json.loads(a.plan)
    out = Path(a.out_dir)
    frames = aggregate(plan, a.results_dir, a.tables, a.epoch)
    frames |= aggregate_figures(json.loads(a.measures), a.results_dir, frames["runs"])
    for name, frame in frames.items():
        files.write_text(out / f"{name}.csv", frame.to_csv(index=False))
    files.write_json(out / "plan.json", plan)


def cmd_gpu_hours(a) -> None:
    import pandas as pd

    from . import files
    from .analysis.cost import load_scale, load_step_times, table_costs

    from .analysis.disk import load_copies, table_disk

    step_times, copies = load_step_times(a.step_times), load_copies(a.disk)
    frames = []
    for config, plan in map(load_scale, a.scales):
        disk = table_disk(plan, config, copies)  # the tables' and the total's rows, then the features' and the peak's
        costed = table_costs(plan, config, step_times, copies["copies"]).merge(disk, on=["scale", "table"], how="left")
        frames += [costed, disk[~disk["table"].isin(costed["table"])]]
    files.write_text(a.out, pd.concat(frames).to_csv(index=False))


def cmd_measure(a) -> None:
    from .measure.run import run_measurement

    run_measurement(a.name, a.run_dir, a.data, json.loads(a.settings), a.out, a.device, a.threads)


def cmd_report(a) -> None:
    from .report.render import render

    render(a.aggregate_dir, a.tables, a.template, a.out, a.scale, json.loads(a.recipe), a.note, a.figures or None, a.claims,
           a.results_dir, a.figures_dir, a.threads)


def cmd_fetch_translation(a) -> None:
    from . import files
    from .data.translation import fetch_source

    paths = fetch_source(a.dataset, Path(a.done).parent, lock_path=a.lock, md5=json.loads(a.md5), mirror=a.mirror or None)
    files.write_json(a.done, {"dataset": a.dataset, "files": [p.name for p in paths]})


def cmd_prepare_translation(a) -> None:
    from .data.translation import prepare_synthetic, prepare_translation

    if a.dataset == "synthetic":
        prepare_synthetic(a.out_dir, seed=0)
    else:
        prepare_translation(a.dataset, a.raw_dir, a.out_dir)


def sequence_outcome(metrics: dict) -> str:
    return ("" if metrics["diverged"] else f"dev loss {metrics['final']['dev_loss']:.3f}") + f" after {metrics['updates']} updates"


def cmd_train_translation(a) -> None:
    from .data.translation import load_encoded, load_prepared_meta
    from .train.translation import train

    meta = load_prepared_meta(a.data)
    train_pairs, dev_pairs = load_encoded(a.data, "train"), load_encoded(a.data, "dev")
    return seed_trainer(a, lambda spec, run_dir: train(spec, train_pairs, dev_pairs, meta["subword"]["vocab_size"], run_dir,
                                                       device=a.device, progress=not a.no_progress, stop_by=a.stop_by),
                        sequence_outcome)


def average_newest(checkpoints: Path, last: int, out: Path) -> None:
    """Average the `last` newest step checkpoints into `out`, and say which. Each must come from the
    run that wrote last.pt, where there is one."""
    from .train.average import average_checkpoints, checkpoints_to_average, run_id_of

    resume_point = checkpoints / "last.pt"
    run_id = run_id_of(resume_point) if resume_point.exists() else None
    summary = average_checkpoints(checkpoints_to_average(checkpoints, last), out, run_id)
    print(f"averaged {summary['n']} checkpoints ({', '.join(summary['files'])}) -> {out}", file=sys.stderr)


def cmd_average(a) -> None:
    average_newest(Path(a.checkpoints), a.last, Path(a.out))


def unless_diverged(evaluate_seed):
    """A seed's evaluation, skipped for a run that diverged in training: its averaged weights hold
    NaN, and the report shows the run as diverged, not a score (analysis/aggregate.read_run)."""

    def evaluate(seed: int, run_dir: Path) -> dict:
        metrics = json.loads((run_dir / "metrics.json").read_text())
        if metrics["diverged"]:
            print(f"{run_dir}: diverged in training at update {metrics['diverged_at']['step']}: not evaluated", file=sys.stderr)
            return {"diverged": True}
        return evaluate_seed(seed, run_dir)

    return evaluate


def cmd_evaluate_translation(a) -> None:
    import torch

    from .evaluate.translation import evaluate_prepared

    if a.threads:
        torch.set_num_threads(a.threads)
    spec = json.loads(a.spec)

    def evaluate_seed(seed: int, run_dir: Path) -> dict:
        averaged = run_dir / "averaged.pt"
        average_newest(run_dir / "checkpoints", spec["average_last"], averaged)
        result = evaluate_prepared(spec, a.data, averaged, run_dir, device=a.device)
        bleu, sacre = result["bleu_tokenized"]["bleu"], result["sacrebleu"]["bleu"]
        print(f"{run_dir}: BLEU {bleu:.2f} tokenized, {sacre:.2f} sacreBLEU", file=sys.stderr)
        return {"bleu_tokenized": bleu, "sacrebleu": sacre}

    return unless_diverged(evaluate_seed)


def cmd_rehearse(a) -> None:
    from .rehearsal import rehearse

    sys.exit(rehearse(a.snakemake_args))


def cmd_fetch_coco(a) -> None:
    from . import files
    from .data.coco import fetch_coco

    paths = fetch_coco(Path(a.done).parent, mirror=a.mirror or None, lock_path=a.lock, md5=json.loads(a.md5))
    files.write_json(a.done, {"dataset": "mscoco", "files": [p.name for p in paths]})


def cmd_fetch_backbone(a) -> None:
    from .data.backbones import fetch_backbone

    fetch_backbone(a.name, a.weights, a.out, mirror=a.mirror or None, md5=json.loads(a.md5))


def cmd_fake_sources(a) -> None:
    from .data.fake_sources import write_fake_sources

    for key in write_fake_sources(Path(a.out), seed=a.seed):
        print(key)


def cmd_prepare_captioning(a) -> None:
    if a.dataset == "scenes":
        from .data.captions import prepare_scenes

        meta = prepare_scenes(a.out_dir, seed=0)
    else:
        from .data.coco import prepare_coco

        meta = prepare_coco(a.raw_dir, a.out_dir, features=a.features, bottom_up=a.bottom_up, backbone=json.loads(a.backbone) or None,
                            device=a.device, weights_file=a.weights_file)
    print(f"{a.out_dir}: {meta['splits']} images, {meta['words_kept']} words seen at least {meta['min_count']} times "
          f"(of {meta['words_in_train']}), {meta['features']['kind']} features {meta['features']['regions']} x {meta['features']['dim']}",
          file=sys.stderr)


def cmd_train_captioning(a) -> None:
    from .train.captioning import train

    def outcome(m: dict) -> str:
        scst = m.get("scst")
        return sequence_outcome(m) + (f", then {scst['updates']} self-critical (dev CIDEr-D {scst['final']['dev_cider']:.3f})"
                                      if scst and scst["final"] else "")

    return seed_trainer(a, lambda spec, run_dir: train(spec, a.data, run_dir, device=a.device, progress=not a.no_progress,
                                                       stop_by=a.stop_by), outcome)


def cmd_evaluate_captioning(a) -> None:
    import torch

    from .evaluate.captioning import Scorers, evaluate_prepared

    if a.threads:
        torch.set_num_threads(a.threads)
    spec = json.loads(a.spec)
    scorers = Scorers()  # once per job: METEOR's Java process serves every seed

    def evaluate_seed(seed: int, run_dir: Path) -> dict:
        averaged = run_dir / "averaged.pt"
        average_newest(run_dir / "checkpoints", spec["average_last"], averaged)
        result = evaluate_prepared(spec, a.data, averaged, run_dir, scorers, device=a.device)
        spice = "SPICE unavailable" if result["spice"] is None else f"SPICE {result['spice']:.1f}"
        print(f"{run_dir}: CIDEr {result['cider']:.1f}, BLEU-4 {result['bleu4']:.1f}, {spice}", file=sys.stderr)
        return {"cider": result["cider"], "bleu4": result["bleu4"], "spice": result["spice"]}

    return unless_diverged(evaluate_seed)


def cmd_launch(a) -> None:
    from .launch import launch

    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    sys.exit(launch(a.gpus, argv))


def cmd_preload(a) -> None:
    from .preload import serve

    serve(a.socket, parent_pid=a.parent_pid)


def each_seed(command):
    """A training or evaluation command over a job's seeds, one after another in this process, each
    in <cell-dir>/seed<N>/. A seed that fails leaves seed<N>/failed.json saying why (the aggregate
    shows it in the report), the next seeds still run, and the command then fails; when all succeed
    it writes the job's --done file last. Slurm's time limit sends SIGTERM: that is recorded too.
    `command(a)` sets up once and returns the function that does one seed."""

    def on_sigterm(signum, frame):
        raise SystemExit("terminated by SIGTERM (a time limit, scancel or shutdown); the rerun resumes from the last checkpoint")

    def run(a) -> None:
        import signal
        import socket
        import time

        from . import files

        signal.signal(signal.SIGTERM, on_sigterm)
        if getattr(a, "minutes", 0) and a.stop_by is None:  # one deadline for the job, whichever process trains
            from .train.time_limit import deadline

            a.stop_by = deadline(a.minutes, time.time())
        if getattr(a, "stack", 0) and len(a.seeds) > 1:
            return run_seeds_stacked(a)
        if getattr(a, "parallel", 1) > 1 and len(a.seeds) > 1:
            return run_seeds_side_by_side(a)
        do_seed = command(a)
        done, failed_seeds = {}, []
        for seed in a.seeds:
            run_dir = Path(a.cell_dir) / f"seed{seed}"
            failed = run_dir / "failed.json"
            started = time.time()
            try:
                done[f"seed{seed}"] = do_seed(seed, run_dir)
            except (Exception, SystemExit) as exc:
                if isinstance(exc, SystemExit) and exc.code in (0, None):
                    raise
                if failed.exists() and failed.stat().st_mtime >= started:
                    raise  # another rank of this job failed first (torchrun then terminates the rest): keep its reason
                error = str(exc) if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}"
                files.write_json(failed, {"error": error, "command": a.command, "host": socket.gethostname(),
                                          "rank": int(os.environ.get("RANK", 0)), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
                if isinstance(exc, SystemExit) or int(os.environ.get("WORLD_SIZE", 1)) > 1:
                    raise  # terminated, or ranks that must stay in step: stop here
                import traceback

                traceback.print_exc()
                failed_seeds.append(seed)
                continue
            failed.unlink(missing_ok=True)
        if failed_seeds:
            sys.exit(f"{a.command}: seed(s) {', '.join(map(str, failed_seeds))} of {a.cell_dir} failed (seed<N>/failed.json says why)")
        if int(os.environ.get("RANK", 0)) == 0:
            files.write_json(a.done, {"seeds": a.seeds, "runs": done})

    return run


def run_seeds_stacked(a) -> None:
    """A classification job's seeds trained stacked as one program on the job's device
    (train/stacked.py). They stand or fall together: when the program fails, each seed's
    failed.json says why, and the job fails; a seed that diverges is a result, as alone."""
    import socket
    import time
    import traceback

    import torch

    from . import files
    from .train.stacked import train_stacked

    if a.parallel > 1:
        sys.exit(f"{a.command}: --stack trains the job's seeds as one program; it cannot combine with --parallel {a.parallel}")
    if a.threads:
        torch.set_num_threads(a.threads)
    spec = json.loads(a.spec)
    run_dirs = [Path(a.cell_dir) / f"seed{seed}" for seed in a.seeds]
    try:
        metrics = train_stacked([{**spec, "seed": seed} for seed in a.seeds], a.data, run_dirs, device=a.device,
                                progress=not a.no_progress, stop_by=a.stop_by)
    except Exception as exc:
        traceback.print_exc()
        for run_dir in run_dirs:
            files.write_json(run_dir / "failed.json", {"error": f"{type(exc).__name__}: {exc}", "command": a.command,
                                                       "host": socket.gethostname(), "rank": 0, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        sys.exit(f"{a.command}: the stacked seeds {', '.join(map(str, a.seeds))} of {a.cell_dir} failed (seed<N>/failed.json says why)")
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

    from . import files

    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        sys.exit(f"{a.command}: --parallel runs seeds side by side on one device; it cannot combine with torchrun ranks")

    def one_seed(seed: int) -> tuple[int, Path]:
        done = Path(a.cell_dir) / f"seed{seed}" / "done.json"
        argv = [*a.command_line, "--seeds", str(seed), "--done", str(done), "--parallel", "1"]  # argparse: the last value wins
        if a.stop_by is not None:
            argv += ["--stop-by", repr(a.stop_by)]
        return subprocess.run([sys.executable, "-m", "resrepro.cli", *argv]).returncode, done

    with ThreadPoolExecutor(max_workers=a.parallel) as pool:
        outcomes = dict(zip(a.seeds, pool.map(one_seed, a.seeds)))
    failed_seeds = [seed for seed, (code, _) in outcomes.items() if code != 0]
    if failed_seeds:
        sys.exit(f"{a.command}: seed(s) {', '.join(map(str, failed_seeds))} of {a.cell_dir} failed (seed<N>/failed.json says why)")
    runs = {}
    for code, done in outcomes.values():
        runs |= json.loads(done.read_text())["runs"]
        done.unlink()
    files.write_json(a.done, {"seeds": a.seeds, "runs": runs})


def add_job_arguments(s) -> None:
    s.add_argument("--seeds", type=int, nargs="+", required=True, help="the seeds to run, one after another")
    s.add_argument("--cell-dir", required=True, help="the cell's folder: seed<N>/ inside it for each seed")
    s.add_argument("--done", required=True, help="written last, when every seed succeeded (the Snakemake output)")


def add_parallel_argument(s) -> None:
    s.add_argument("--parallel", type=int, default=1,
                   help="seeds trained at once, each its own process on the job's device (config seeds_in_parallel)")


def add_device_arguments(s) -> None:
    s.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, cuda:1, ...")
    s.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: torch's default)")


def add_seed_job(sub, name: str, help: str, command, data: str, training: bool) -> None:
    """A per-seed job's subcommand (training or evaluating a cell's runs): its spec, seeds, data,
    device and threads; training adds --no-progress and --parallel."""
    s = sub.add_parser(name, help=help)
    s.add_argument("--spec", required=True, help="the cell's spec as JSON, without the seed (experiments.job_train_spec)"
                   if training else "the evaluation spec as JSON (experiments.eval_spec)")
    add_job_arguments(s)
    s.add_argument("--data", required=True, help=data)
    add_device_arguments(s)
    if training:
        s.add_argument("--no-progress", action="store_true")
        add_parallel_argument(s)
        if name == "train":  # classification only: the Transformers' runs train alone
            s.add_argument("--stack", type=int, choices=(0, 1), default=0,
                           help="1: the job's seeds train stacked as one program on its device (config seeds_stacked)")
        s.add_argument("--minutes", type=float, default=0,
                       help="the job's time limit: a run stops at a checkpoint before it, and the job's next attempt continues it")
        s.add_argument("--stop-by", type=float, default=None, help=argparse.SUPPRESS)  # the parent job's deadline, for --parallel
    s.set_defaults(run=each_seed(command))


def add_pin_arguments(s, lock: bool = False) -> None:
    """A download command's md5 pins (config download_md5) and, for trust on first use, its lock file."""
    s.add_argument("--md5", default="{}", help='JSON {file name: md5}: verify these files by their pin instead of a '
                   "published checksum or the lock (a mirror whose files differ from the published ones)")
    if lock:
        s.add_argument("--lock", default="resources/checksums.lock.json", help="the checksum lock file (trust on first use)")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="resrepro", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("download", help="download a dataset archive, verified by md5")
    s.add_argument("dataset", choices=["cifar10", "cifar100"])
    s.add_argument("--out", required=True)
    s.add_argument("--url", help="a mirror URL or file path instead of the official one")
    add_pin_arguments(s)
    s.set_defaults(run=cmd_download)

    s = sub.add_parser("prepare", help="turn a dataset into the prepared .pt format")
    s.add_argument("dataset", choices=["cifar10", "cifar100", "digits"])
    s.add_argument("--archive", help="the downloaded archive (CIFAR)")
    s.add_argument("--out", required=True)
    s.set_defaults(run=cmd_prepare)

    add_seed_job(sub, "train", "train (or resume) a cell's runs, one per seed",
                 cmd_train, "prepared dataset (.pt)", training=True)

    s = sub.add_parser("aggregate", help="all runs -> runs.csv, rows.csv, curves.csv")
    s.add_argument("--plan", required=True, help="JSON list of table rows and their runs")
    s.add_argument("--results-dir", required=True)
    s.add_argument("--tables", nargs="+", required=True, help="the papers' tables (config/tables/*.yaml)")
    s.add_argument("--epoch", choices=["final", "best"], default="final")
    s.add_argument("--measures", default="[]", help="JSON list of figure cells, their measurement and runs")
    s.add_argument("--out-dir", required=True)
    s.set_defaults(run=cmd_aggregate)

    s = sub.add_parser("gpu-hours", help="GPU-hours and disk per table of the given scales -> CSV")
    s.add_argument("--scales", nargs="+", required=True, help="scale profiles to cost (config/paper.yaml, ...)")
    s.add_argument("--step-times", required=True, help="config/costs/*.yaml (benchmarks/gpu_budget.py)")
    s.add_argument("--disk", required=True, help="config/costs/disk.yaml (benchmarks/disk_use.py)")
    s.add_argument("--out", required=True)
    s.set_defaults(run=cmd_gpu_hours)

    s = sub.add_parser("measure", help="a registered measurement of one trained run -> a tidy CSV")
    s.add_argument("--name", required=True, help="the measurement (resrepro.measure.MEASUREMENTS)")
    s.add_argument("--run-dir", required=True, help="the run's folder (checkpoints/last.pt)")
    s.add_argument("--data", required=True, help="the run's prepared data")
    s.add_argument("--settings", default="{}", help="JSON: the measurement's settings (a figure's)")
    add_device_arguments(s)
    s.add_argument("--out", required=True)
    s.set_defaults(run=cmd_measure)

    s = sub.add_parser("report", help="render the HTML report")
    s.add_argument("--aggregate-dir", required=True)
    s.add_argument("--tables", nargs="+", required=True, help="the papers' tables (config/tables/*.yaml)")
    s.add_argument("--figures", nargs="*", default=[], help="the papers' figures (config/figures/*.yaml)")
    s.add_argument("--claims", nargs="?", help="each paper's claims (config/claims.yaml), for the summary; "
                   "given empty (a config without claims), none")
    s.add_argument("--results-dir", help="the runs' folder: each row links to its runs there")
    s.add_argument("--figures-dir", help="also write each image of the report there, as <table or figure id>.png")
    s.add_argument("--template", required=True)
    s.add_argument("--scale", required=True)
    s.add_argument("--recipe", default="{}", help="JSON: the scale's recipe, shown in the report")
    s.add_argument("--note", default="", help="what this scale can and cannot show, shown in the report")
    s.add_argument("--out", required=True)
    s.add_argument("--threads", type=int, default=1, help="processes that draw the figures")
    s.set_defaults(run=cmd_report)

    s = sub.add_parser("fetch-translation", help="download a translation dataset's files (checksummed)")
    s.add_argument("dataset")
    s.add_argument("--done", required=True, help="marker file written when every file is there")
    s.add_argument("--mirror", default="", help="a mirror base URL or folder instead of the official one")
    add_pin_arguments(s, lock=True)
    s.set_defaults(run=cmd_fetch_translation)

    s = sub.add_parser("prepare-translation", help="joint subword vocabulary and encoded splits")
    s.add_argument("dataset")
    s.add_argument("--raw-dir", help="where fetch-translation put the files (not for synthetic)")
    s.add_argument("--out-dir", required=True)
    s.set_defaults(run=cmd_prepare_translation)

    add_seed_job(sub, "train-translation", "train (or resume) a translation cell's runs, one per seed",
                 cmd_train_translation, "prepared dataset folder", training=True)

    s = sub.add_parser("average", help="average the last N step checkpoints")
    s.add_argument("--checkpoints", required=True, help="folder of step<N>.pt files")
    s.add_argument("--last", type=int, default=10)
    s.add_argument("--out", required=True)
    s.set_defaults(run=cmd_average)

    add_seed_job(sub, "evaluate-translation", "per seed: average the last checkpoints, beam search on the test set, BLEU both ways",
                 cmd_evaluate_translation, "prepared dataset folder", training=False)

    s = sub.add_parser("fetch-coco", help="download MSCOCO 2014's images and Karpathy's splits (checksummed)")
    s.add_argument("--done", required=True, help="marker file written when every file is there")
    s.add_argument("--mirror", default="", help="a mirror base URL or folder instead of the official ones")
    add_pin_arguments(s, lock=True)
    s.set_defaults(run=cmd_fetch_coco)

    s = sub.add_parser("fetch-backbone", help="download a torchvision backbone's weights (verified by the hash in its file name)")
    s.add_argument("name", help="a torchvision model, e.g. resnet101")
    s.add_argument("--weights", required=True, help="its weights, e.g. IMAGENET1K_V2")
    s.add_argument("--out", required=True, help="the weight file to write")
    s.add_argument("--mirror", default="", help="a mirror base URL or folder instead of download.pytorch.org")
    add_pin_arguments(s)
    s.set_defaults(run=cmd_fetch_backbone)

    s = sub.add_parser("fake-sources", help="fake copies of every paper-scale download, in the real formats (the rehearsal's)")
    s.add_argument("--out", required=True, help="folder to write them in (data/fake_sources.py gives the layout)")
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(run=cmd_fake_sources)

    s = sub.add_parser("prepare-captioning", help="vocabulary, captions and image features of a captioning dataset")
    s.add_argument("dataset", choices=["scenes", "mscoco"])
    s.add_argument("--raw-dir", help="where fetch-coco put the files (mscoco)")
    s.add_argument("--out-dir", required=True)
    s.add_argument("--features", choices=["grid", "bottom_up"], default="grid", help="mscoco: a backbone's grid, or bottom-up boxes")
    s.add_argument("--bottom-up", nargs="*", default=[], help="Anderson et al.'s TSV files (features bottom_up)")
    s.add_argument("--backbone", default="{}", help='JSON: {"name": "resnet101", "weights": "IMAGENET1K_V2", "size": 224} (features grid)')
    s.add_argument("--weights-file", nargs="?", help="the backbone's weights, from fetch-backbone (features grid with weights)")
    s.add_argument("--device", default="auto")
    s.set_defaults(run=cmd_prepare_captioning)

    add_seed_job(sub, "train-captioning", "train (or resume) a captioning cell's runs, one per seed",
                 cmd_train_captioning, "prepared dataset folder", training=True)

    add_seed_job(sub, "evaluate-captioning", "per seed: average the last checkpoints, caption the test images, COCO metrics",
                 cmd_evaluate_captioning, "prepared dataset folder", training=False)

    s = sub.add_parser("launch", help="run a command on N GPUs: itself for one, torchrun ranks for several")
    s.add_argument("--gpus", type=int, default=0, help="GPUs the job holds (its Snakemake gpu resource)")
    s.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the resrepro command and its options")
    s.set_defaults(run=cmd_launch)

    s = sub.add_parser("preload", help="serve CPU jobs from one process with torch imported (a local run's start-up, paid once)")
    s.add_argument("--socket", required=True, help="the Unix socket to listen on (jobs find it in $RESREPRO_PRELOAD)")
    s.add_argument("--parent-pid", type=int, help="stop when this process (the Snakemake that started the server) ends")
    s.set_defaults(run=cmd_preload)

    s = sub.add_parser("rehearse", help="the paper scale's whole DAG on fake data in the real formats (config/rehearsal.yaml)")
    s.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="Snakemake's options, e.g. --cores 2")
    s.set_defaults(run=cmd_rehearse)

    a, unknown = p.parse_known_args(argv)
    if a.command == "rehearse":  # everything after `rehearse` is Snakemake's, options first
        a.snakemake_args = unknown + a.snakemake_args
    elif unknown:
        p.error(f"unrecognized arguments: {' '.join(unknown)}")
    if os.environ.get("RESREPRO_VARIANT_MODULES"):  # residual variants from outside the package (plugins.py)
        from .plugins import load

        load()
    a.command_line = list(sys.argv[1:] if argv is None else argv)  # as given: --parallel reruns it per seed
    keep_freed_memory()
    a.run(a)


if __name__ == "__main__":
    main()
