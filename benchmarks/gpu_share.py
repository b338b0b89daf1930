"""How many small training runs should share one GPU: throughput of K runs side by side.

A PreAct-ResNet-20 step at batch 128 takes about 9 ms on an H100 (docs/gpu-h100-2026-11-23.md),
bound by kernel launches and the CPU, not by the GPU's compute. K separate processes (what
`seeds_in_parallel: K` starts) each train the same model on random CIFAR-shaped batches, with the
recipe's speed switches as the training loop resolves them for the device (bf16, channels-last,
fused SGD on a GPU), for `--seconds` after a warm-up. The table gives, per K, the median step time
of one run, the images per second of all K together, and that throughput relative to K = 1:
choose the K where it stops growing (and memory still fits) for `seeds_in_parallel`.

    .venv/bin/python benchmarks/gpu_share.py --device cuda --runs 1 2 4 8
    .venv/bin/python benchmarks/gpu_share.py --device cuda --depth 110 --runs 1 2 4

On a CPU it runs too (the table then says what the cores give), which is how it is tested.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from resrepro.devices import GPUS_HELD_BY_LAUNCH


def worker(opts: argparse.Namespace) -> None:
    """One run: steps until --seconds have passed after --warmup steps; prints its step times (JSON)."""
    import torch

    from gpu_budget import training_step  # the same step the budget times
    from resrepro.devices import pick_device
    from resrepro.specs import ClassificationTrainSpec

    torch.set_num_threads(opts.threads)
    # a ResNet's step at the batch asked for; the recipe's other keys do not enter one step
    spec = ClassificationTrainSpec.from_dict({
        "task": "classification", "dataset": "cifar10", "arch": f"preact_resnet{opts.depth}", "model": "preact_resnet", "depth": opts.depth,
        "variant": opts.variant, "args": {}, "epochs": 1, "batch_size": opts.batch, "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4,
        "lr_milestones": [], "warmup_lr": 0.01, "warmup_iterations": 0, "warmup_min_depth": 0, "augment_pad": 4, "augment_flip": True})
    step = training_step(spec, pick_device(opts.device))

    for _ in range(opts.warmup):
        step()
    times, deadline = [], time.perf_counter() + opts.seconds
    while time.perf_counter() < deadline or len(times) < 2:
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    print(json.dumps({"step_s": times}))


def side_by_side(k: int, opts: argparse.Namespace) -> list[list[float]]:
    """Step times of each of `k` worker processes started together."""
    argv = [sys.executable, __file__, "--worker", "--device", opts.device, "--depth", str(opts.depth), "--variant", opts.variant,
            "--batch", str(opts.batch), "--seconds", str(opts.seconds), "--warmup", str(opts.warmup), "--threads", str(opts.threads)]
    # As `seeds_in_parallel: K` runs them: K processes under the one GPU their job holds, not K jobs
    # each waiting for a GPU of its own from the pool.
    env = {**os.environ, GPUS_HELD_BY_LAUNCH: "1"}
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env) for _ in range(k)]
    outputs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"a worker failed (K={k})")
    return [json.loads(out.strip().splitlines()[-1])["step_s"] for out in outputs]


def throughput_table(results: dict[int, list[list[float]]], batch: int) -> list[dict]:
    """Per K: median step ms of one run, images/s of the K runs together (each run's images over
    its median step), and that relative to the first K."""
    rows = []
    for k, runs in results.items():
        medians = [statistics.median(times) for times in runs]
        rows.append({"runs": k, "step_ms": 1000 * statistics.median(medians), "images_per_s": sum(batch / m for m in medians)})
    for row in rows:
        row["vs_one"] = row["images_per_s"] / rows[0]["images_per_s"]
    return rows


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--variant", default="add")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--runs", type=int, nargs="+", default=[1, 2, 4, 8], help="K values: runs side by side")
    p.add_argument("--seconds", type=float, default=20.0, help="timed seconds per run after warm-up")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--threads", type=int, default=1, help="CPU threads per run")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    if opts.worker:
        worker(opts)
        return []
    rows = throughput_table({k: side_by_side(k, opts) for k in opts.runs}, opts.batch)
    print(f"PreAct-ResNet-{opts.depth} {opts.variant}, batch {opts.batch}, device {opts.device}, {opts.seconds:g} s per run")
    print("| runs side by side | step ms (one run) | images/s (all) | vs one run |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['runs']} | {row['step_ms']:.1f} | {row['images_per_s']:.0f} | {row['vs_one']:.2f}x |")
    return rows


if __name__ == "__main__":
    main()
