"""What a finished run of a scale keeps on disk, per kind of file, in copies of its model's weights:
the measurement behind config/costs/disk.yaml (resrepro.analysis.disk scales it to every scale).

For every run folder under results/<scale>/ with a metrics.json (its parameters, its dtype), each
kept file is put in its kind (checkpoints/step<N>.pt: step; last.pt; scst.pt; epoch<E>.pt:
snapshot; averaged.pt) and its bytes divided by the run's weight bytes (parameters x 4, or 8 in
float64). Runs of fewer than --min-parameters (100,000) are left out: there a file's fixed part (the spec,
the optimizer's step counters) is not small against the weights. Prints, per task and kind, the
files, the median and the range of copies, and the bytes the scale's runs and data take; with
--write, writes the medians into the copies file. Then it compares the estimate of
resrepro.analysis.disk for the scale's plan with what the runs measured.

    .venv/bin/python benchmarks/disk_use.py --scale rehearsal [--write config/costs/disk.yaml]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import defaultdict
from datetime import date
from pathlib import Path

import yaml

KIND = (("step", re.compile(r"^step\d+\.pt$")), ("snapshot", re.compile(r"^epoch\d+\.pt$")), ("last", re.compile(r"^last\.pt$")),
        ("scst", re.compile(r"^scst\.pt$")), ("averaged", re.compile(r"^averaged\.pt$")))


def kind_of(path: Path) -> str | None:
    return next((kind for kind, pattern in KIND if pattern.match(path.name)), None)


def run_files(results: Path):
    """(task, run folder, weight bytes, {kind: [bytes, ...]}) of every finished run under `results`."""
    for metrics_path in sorted(results.glob("*/*/*/*/*/seed*/metrics.json")):
        run_dir = metrics_path.parent
        metrics = json.loads(metrics_path.read_text())
        parameters = metrics.get("parameters")
        if not parameters:
            continue
        dtype = (metrics.get("spec") or {}).get("dtype", "float32")
        kinds = defaultdict(list)
        for path in [*run_dir.glob("checkpoints/*.pt"), *run_dir.glob("*.pt")]:
            if kind := kind_of(path):
                kinds[kind].append(path.stat().st_size)
        yield run_dir.relative_to(results).parts[0], run_dir, parameters * (8 if dtype == "float64" else 4), dict(kinds)


def measure(results: Path, min_parameters: int) -> dict[str, list[float]]:
    copies = defaultdict(list)
    for task, _, weights, kinds in run_files(results):
        if weights < 4 * min_parameters:
            continue
        for kind, sizes in kinds.items():
            copies[f"{task}/{kind}"] += [size / weights for size in sizes]
    return dict(copies)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def compare(results: Path, config_path: Path, copies: dict[str, float]) -> None:
    """The estimate of resrepro.analysis.disk beside the bytes each finished run of the plan keeps."""
    from resrepro.analysis import disk
    from resrepro.experiments import make_plan

    config = yaml.safe_load(config_path.read_text())
    plan = make_plan({**config, "download_urls": {}})  # the plan only: no mirror need exist
    kept = {str(folder.relative_to(results)): kinds for _, folder, _, kinds in run_files(results)}
    measured, estimated = defaultdict(float), defaultdict(float)
    for path, run in plan.runs.items():
        if (kinds := kept.get(path)) is None:
            continue
        measured[run.task] += sum(sum(sizes) for sizes in kinds.values())
        estimated[run.task] += disk.run_bytes(run, config, copies)
    for task in sorted(measured):
        print(f"{task:24} kept {measured[task] / 1e9:8.2f} GB, estimated {estimated[task] / 1e9:8.2f} GB "
              f"({estimated[task] / measured[task]:.3f}x)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", default="rehearsal")
    p.add_argument("--results", type=Path, default=None, help="default: results/<scale>")
    p.add_argument("--min-parameters", type=int, default=100_000)
    p.add_argument("--write", type=Path, help="write the medians into this copies file")
    opts = p.parse_args(argv)
    results = opts.results or Path("results") / opts.scale
    copies = measure(results, opts.min_parameters)
    if not copies:
        print(f"no finished run of at least {opts.min_parameters:,} parameters under {results}", file=sys.stderr)
        return 1
    print(f"{'task/kind':24} {'files':>6} {'median':>8} {'min':>8} {'max':>8}   (copies of the run's weights)")
    for key, values in sorted(copies.items()):
        print(f"{key:24} {len(values):6d} {statistics.median(values):8.4f} {min(values):8.4f} {max(values):8.4f}")
    for folder in sorted(p for p in results.iterdir() if p.is_dir()):
        print(f"{folder.name:24} {folder_bytes(folder) / 1e9:8.2f} GB")
    compare(results, Path("config") / f"{opts.scale}.yaml", {k: statistics.median(v) for k, v in copies.items()})
    if opts.write:
        opts.write.write_text(
            "# Copies of a run's weights that each kind of kept file is (resrepro.analysis.disk): the median of\n"
            "# file bytes / (parameters x 4, or 8 in float64) over the runs measured. Written by benchmarks/disk_use.py.\n"
            + yaml.safe_dump({"source": f"measured on results/{opts.scale} ({date.today().isoformat()}), runs of at least "
                                        f"{opts.min_parameters:,} parameters, by benchmarks/disk_use.py",
                              "copies": {key: round(statistics.median(v), 4) for key, v in sorted(copies.items())}}, sort_keys=False))
        print(f"wrote {opts.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
