"""What K runs stacked as one program (src/resrepro/models/stacked.py) cost a step, against one run alone.

A PreAct-ResNet-110 step at batch 128 is its kernel launches on an H100 (55.8 ms eager, 27.2 ms as
CUDA graphs, for about 96 GFLOP: docs/gpu-h100-2026-11-26.md). Stacked, each launch does K runs'
work. For each variant, each K of `--runs` (1: the run alone, the module itself; more: K runs
stacked) and each mode (`eager`; `graphs`: forward and backward captured once as one CUDA graph
and replayed, the optimizer's fused step after it; `compiled`: inductor's kernels; `compiled-graphs`:
those captured as graphs), it times training steps on random CIFAR-shaped
batches (one per run), with the speed switches training resolves for the device (bf16 autocast,
fused SGD and, for the run alone, channels-last on a GPU).

The table gives the step time of all K runs together, the time per run (step / K), that time
against the run alone in the same mode and variant, the peak memory, what a paper run (164
epochs of 391 steps: 50,000 images at batch 128) costs at that pace in GPU-minutes, training
steps only, and the seconds the row took (building and compiling included). Issue 45's targets: a ResNet-110 paper run in 6 GPU-minutes (5.6 ms a run-step),
SAS within 1.5x add's time.

    python benchmarks/stacked_step_time.py --device cuda --depth 110 --runs 1 4 8 16 --variants add sas
    .venv/bin/python benchmarks/stacked_step_time.py --device cpu --depth 8 --runs 1 2 --steps 1 --rounds 1

Rows print as they are measured (a loan that ends early keeps those); `--budget` seconds skips
what is left, and a configuration that fails (memory, a capture torch refuses) prints its error
and the next one runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch.nn import functional as F

from resrepro import models
from resrepro.devices import use_deterministic_algorithms
from resrepro.models.stacked import StackedRuns
from resrepro.speed import speed_of

PAPER_STEPS = 164 * 391  # He et al. 2016b's CIFAR schedule: 164 epochs of 50,000 images at batch 128
MODES = ("eager", "graphs", "compiled", "compiled-graphs")


def paper_run_minutes(run_ms: float) -> float:
    """GPU-minutes of a paper run's training steps at `run_ms` a step."""
    return run_ms * PAPER_STEPS / 60_000


def row(variant: str, runs: int, mode: str, step_ms: float, alone_ms: float | None, peak_mb: float) -> dict:
    """One line of the table; `alone_ms` is the run alone's step in the same variant and mode."""
    run_ms = step_ms / runs
    return {"variant": variant, "runs": runs, "mode": mode, "step_ms": step_ms, "run_ms": run_ms,
            "vs_alone": run_ms / alone_ms if alone_ms else 1.0, "peak_mb": peak_mb, "paper_run_min": paper_run_minutes(run_ms)}


def build(variant: str, depth: int, seed: int, device, speed):
    torch.manual_seed(seed)
    model = models.build({"arch": "preact_resnet", "depth": depth, "variant": variant, "args": {}, "classes": 10, "in_channels": 3})
    return speed.place(model, device)


def training_step(variant: str, runs: int, depth: int, batch: int, device, speed, mode: str):
    """A function doing one training step of `runs` runs (stacked when more than one)."""
    alone = runs == 1
    nets = [build(variant, depth, seed, device, speed) for seed in range(runs)]
    net = nets[0] if alone else StackedRuns(nets)
    if mode.startswith("compiled"):  # inductor's fused kernels (BN, ReLU, SAS's gates), with graphs or not
        net = torch.compile(net) if alone else net.compile()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, **speed.optimizer_options())
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn((batch, 3, 32, 32) if alone else (runs, batch, 3, 32, 32), generator=g).to(device)
    x = speed.layout(x) if alone else x
    y = torch.randint(0, 10, x.shape[:-3], generator=g).to(device)

    def forward_backward():
        # without autocast's cache of cast weights, which a CUDA graph capture does not allow (torch's docs)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=speed.amp, cache_enabled=False):
            logits = net(x)
        # each run's mean loss, summed: run k's gradient is its own loss's
        loss = F.cross_entropy(logits.float().flatten(0, -2), y.flatten(), reduction="none").view(runs, -1).mean(1).sum()
        loss.backward()

    def eager():
        opt.zero_grad(set_to_none=True)
        forward_backward()
        opt.step()

    if not mode.endswith("graphs"):
        return eager
    # CUDA graphs: warm up on a side stream (torch's recipe for capture), then record forward and
    # backward once; the gradients are the graph's static outputs, which the optimizer then reads
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            eager()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        forward_backward()

    def replayed():
        graph.replay()
        opt.step()

    return replayed


def time_steps(step, sync, warmup: int, steps: int, rounds: int) -> float:
    """Median over `rounds` of the mean step time (ms) of `steps` steps in a row."""
    for _ in range(warmup):
        step()
    sync()
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        times.append((time.perf_counter() - started) * 1000 / steps)
    return statistics.median(times)


def print_row(r: dict) -> None:
    print(f"{r['variant']:<8} {r['runs']:>4} {r['mode']:<7} {r['step_ms']:>9.2f} {r['run_ms']:>8.2f} {r['vs_alone']:>8.2f} "
          f"{r['peak_mb']:>8.0f} {r['paper_run_min']:>9.1f} {r['seconds']:>7.0f}", flush=True)


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--depth", type=int, default=110)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--runs", type=int, nargs="+", default=[1, 4, 8, 16])
    p.add_argument("--variants", nargs="+", default=["add", "sas"])
    p.add_argument("--modes", nargs="+", choices=MODES, default=None, help="default: eager and graphs on a GPU, eager on the CPU")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--budget", type=float, default=300, help="seconds; what is left after it is skipped")
    p.add_argument("--deterministic", action="store_true", help="torch's deterministic algorithms, as the paper recipes train")
    opts = p.parse_args(argv)
    if opts.deterministic:
        use_deterministic_algorithms()  # before the first matrix product (cuBLAS workspace)

    device = torch.device(opts.device)
    speed = speed_of({}, device, image_model=True)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    modes = opts.modes or (["eager", "graphs"] if device.type == "cuda" else ["eager"])
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"# PreAct-ResNet-{opts.depth}, batch {opts.batch} a run, on {name}, torch {torch.__version__}; {speed}"
          f"{'; deterministic' if opts.deterministic else ''}")
    print(f"{'variant':<8} {'runs':>4} {'mode':<7} {'step_ms':>9} {'run_ms':>8} {'vs_alone':>8} {'peak_mb':>8} {'paper_min':>9} {'seconds':>7}")
    started, rows = time.monotonic(), []
    for variant in opts.variants:
        for mode in modes:
            alone_ms = None
            for runs in opts.runs:
                if time.monotonic() - started > opts.budget:
                    print(f"{variant:<8} {runs:>4} {mode:<7} skipped: --budget {opts.budget:.0f} s spent", flush=True)
                    continue
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats(device)
                begun = time.monotonic()
                try:
                    step = training_step(variant, runs, opts.depth, opts.batch, device, speed, mode)
                    step_ms = time_steps(step, sync, opts.warmup, opts.steps, opts.rounds)
                except Exception as err:  # one configuration's failure (memory, capture) is a result, not the end
                    print(f"{variant:<8} {runs:>4} {mode:<7} failed: {type(err).__name__}: {str(err).splitlines()[0][:160]}", flush=True)
                    continue
                peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0
                r = {**row(variant, runs, mode, step_ms, alone_ms, peak), "seconds": time.monotonic() - begun}  # building and compiling included
                alone_ms = alone_ms or (step_ms if runs == 1 else None)
                rows.append(r)
                print_row(r)
    print(f"# {time.monotonic() - started:.0f} s")
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
