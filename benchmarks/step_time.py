"""Training step time of every residual variant, relative to `add`, measured side by side.

What it measures: one training step of PreAct-ResNet-(depth) (default 20) on a fixed random
batch (default 128 x 3 x 32 x 32, 10 classes) = forward, cross-entropy, backward and an SGD step
(lr 0.1, momentum 0.9), for every variant of `resrepro.residual.REGISTRY`: the paper rows
(xskip lam=2, sas ablations, ...) plus any other registered name with its default args, so a new
variant shows up without editing this file.

How (the machine is shared and noisy): a fixed seed; every variant gets its own model and
optimizer, built once; each takes `--warmup` untimed steps; then the variants are interleaved in
`--rounds` round-robin rounds (the starting variant rotates each round), each variant timing
`--steps` single steps per round. The table gives per variant the median step time in ms and its
ratio to add's median, the minimum step time and its ratio to add's minimum, the parameter count
and the number of timed steps. Only ratios measured in the same run are comparable; absolute times
depend on the load. When other jobs share the cores (the header and footer print the load
average), the medians swing and the min ratio is the steadier estimate.

The recipe's speed switches (`--amp`, `--channels-last`, `--compile`, `--fused-optimizer`,
`--tf32`; src/resrepro/speed.py) default to what training resolves for the device: fp32 and eager
on the CPU, bf16 autocast, channels-last, a fused optimizer and TF32 matmuls on a GPU.
`--variants sas highway` times only those rows and the baseline (compiling each model takes a
minute on the CPU).

The `ops` column counts the operations one step dispatches that compute (forward, backward and
optimizer; views excluded), from one untimed step before the rounds. It is the same on every
machine. On a GPU in eager mode each is a kernel launch costing microseconds of host time, so at
small sizes a step's time follows this count more than its arithmetic (docs/performance.md).
Compiled, the count is not taken: the compiled graph's kernels are not torch's operations.

The `GFLOP` column is the step's arithmetic in matrix products and convolutions, forward and
backward (torch's own `FlopCounterMode`, on the same untimed step, run eager when the timed steps
are compiled: the model's FLOPs do not depend on how they run), and `FLOP vs` its ratio to the
baseline's. Where a step is compute-bound, its time ratio cannot fall far below this ratio
without changing the model: it bounds what any speed-up of a variant's code can reach.

Run (from the repository root):

    .venv/bin/python benchmarks/step_time.py
    .venv/bin/python benchmarks/step_time.py --device cuda --compile --variants sas highway
    .venv/bin/python benchmarks/step_time.py --rounds 5 --steps 3 --threads 2 --csv benchmarks/step_time.csv

At the defaults (5 rounds x 2 steps after 1 warm-up step, 15 variants) it takes about 1.5-2
minutes on 2 CPU cores (a step is ~0.2-0.3 s there when the machine is quiet); `--budget`
(default 150 s) drops the last rounds when a loaded machine makes steps slower, and says so.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import statistics
import sys
import time

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from resrepro import devices, residual
from resrepro.models import count_parameters
from resrepro.models.preact_resnet import PreActResNet
from resrepro.speed import Speed, speed_of

BASELINE: tuple[str, dict] = ("add", {})

# (name, args) in table order; the registry's remaining names are appended with default args.
PAPER_VARIANTS: list[tuple[str, dict]] = [
    ("plain", {}),
    BASELINE,
    ("xskip", {"lam": 2}),
    ("xskip_ln", {"lam": 2}),
    ("xskip_bn", {"lam": 2}),
    ("scale_f", {"k": 2}),
    ("ln_scale_f", {"k": 2}),
    ("rskip_ln", {"lam": 2}),
    ("rskip_bn", {"lam": 2}),
    ("wskip_ln", {"init": 1}),
    ("sas", {}),
    ("sas", {"gate": "single"}),
    ("sas", {"gamma": "free"}),
    ("sas", {"norm": "bn"}),
    ("highway", {}),
]


def variants() -> list[tuple[str, dict]]:
    """The paper rows that exist in the registry, then every other registered name (defaults)."""
    rows = [(n, a) for n, a in PAPER_VARIANTS if n in residual.REGISTRY]
    listed = {n for n, _ in rows}
    rows += [(n, {}) for n in residual.REGISTRY if n not in listed]
    return rows


def add_run_options(p: argparse.ArgumentParser, rounds: int, steps: int | None = None) -> None:
    """Options every benchmark here shares; `steps` (timed steps per variant per round) also adds
    --warmup and --csv, for the step-time benchmarks."""
    p.add_argument("--rounds", type=int, default=rounds, help=f"round-robin rounds (default {rounds})")
    if steps is not None:
        p.add_argument("--steps", type=int, default=steps, help=f"timed steps per variant per round (default {steps})")
        p.add_argument("--warmup", type=int, default=1, help="untimed steps per variant before round 1 (default 1)")
        p.add_argument("--csv", metavar="PATH", default=None, help="also write the table as CSV to PATH")
    p.add_argument("--budget", type=float, default=150.0,
                   help="seconds for warm-up + rounds; later rounds are skipped (whole rounds only, at least 1) "
                        "when the next one would not fit, e.g. on a loaded machine (default 150; 0 = no limit)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1, ...")
    p.add_argument("--seed", type=int, default=0, help="seed for models and inputs (default 0)")
    p.add_argument("--deterministic", action="store_true",
                   help="deterministic kernels, as a recipe's `deterministic: true` trains (its cost on a GPU)")
    if steps is not None:
        add_speed_options(p)


def add_speed_options(p: argparse.ArgumentParser) -> None:
    """The recipe's speed switches (resrepro.speed), resolved for the device as training resolves
    them, and --variants to time a few rows (a compiled variant compiles in its warm-up steps)."""
    p.add_argument("--amp", "--precision", dest="amp", default="auto", choices=("auto", "bf16", "fp32"),
                   help="auto: bf16 autocast on CUDA, fp32 elsewhere, as training (default auto)")
    p.add_argument("--compile", nargs="?", const="inductor", default=None, metavar="BACKEND",
                   help="torch.compile every model as a recipe's `compile` does (alone: inductor)")
    p.add_argument("--fused-optimizer", default="auto", choices=("auto", "true", "false"),
                   help="torch's fused optimizer step; auto: on CUDA, as training (default auto)")
    p.add_argument("--tf32", default="auto", choices=("auto", "true", "false"),
                   help="float32 matrix products (the gates' under autocast) in TF32; auto: on CUDA, as training (default auto)")
    p.add_argument("--variants", nargs="+", default=None, metavar="NAME",
                   help="time only these rows besides the baseline: a row's label (sas, sas-gatesingle) or a "
                        "registry name that labels no row (all its rows)")


def speed_from(opts: argparse.Namespace, device: torch.device, image_model: bool = False) -> Speed:
    """The switches of the command line as a recipe would set them, resolved for `device`."""
    def switch(value: str):
        return {"true": True, "false": False}.get(value, value)

    spec = {"amp": opts.amp, "compile": opts.compile or False, "fused_optimizer": switch(opts.fused_optimizer), "tf32": switch(opts.tf32)}
    if image_model:
        spec["channels_last"] = switch(opts.channels_last)
    return speed_of(spec, device, image_model=image_model)


def speed_text(speed: Speed) -> str:
    on = [name for name, flag in (("bf16 autocast", speed.amp), ("channels-last", speed.channels_last),
                                  ("fused optimizer", speed.fused_optimizer), ("TF32 matmuls", speed.tf32)) if flag]
    if speed.compile:
        on.append(f"torch.compile ({speed.compile})")
    return ", ".join(on) or "fp32, eager"


def chosen(rows: list[tuple[str, dict]], names: list[str] | None, baseline: tuple[str, dict]) -> list[tuple[str, dict]]:
    """`rows`, or when `names` is given the baseline row and the rows they name: a row's label
    (residual.variant_id: `sas`, `sas-gatesingle`) names that row; a registry name that labels no
    row (`sas` in the Transformer's rows, whose SAS row is `sas-bias_a0-bias_b0`) names all its rows."""
    if names is None:
        return rows
    labels = {residual.variant_id(n, a) for n, a in rows}
    unknown = sorted(set(names) - labels - {n for n, _ in rows})
    if unknown:
        raise SystemExit(f"--variants: not in this benchmark's rows: {', '.join(unknown)}")

    def named(n: str, a: dict) -> bool:
        label = residual.variant_id(n, a)
        return label in names or (n in names and n not in labels) or (n, a) == baseline

    return [(n, a) for n, a in rows if named(n, a)]


def time_interleaved(benches: list, run_step, sync, opts: argparse.Namespace, t_start: float) -> int:
    """Warm-up steps per variant, then round-robin rounds (the start rotates, so no variant always
    runs first) of `opts.steps` timed steps each, appended to `b.times`; stops early when the next
    round would overrun `opts.budget`. Returns the rounds done."""
    for b in benches:
        for _ in range(opts.warmup):
            run_step(b)
        sync()
    n, rounds_done = len(benches), 0
    for r in range(opts.rounds):
        elapsed = time.perf_counter() - t_start
        if r > 0 and opts.budget > 0 and elapsed + elapsed / (r + (opts.warmup / opts.steps)) > opts.budget:
            break  # the next round would overrun the budget
        for i in range(n):
            b = benches[(i + r) % n]
            for _ in range(opts.steps):
                sync()
                t0 = time.perf_counter()
                run_step(b)
                sync()
                b.times.append(time.perf_counter() - t0)
        rounds_done += 1
    return rounds_done


class OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched inside it that compute: below autograd, so the
    backward's and the optimizer's count too; views (detach, transpose, expand, ...) do not."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and func.overloadpacket is not torch.ops.aten._unsafe_view:  # a view, untagged
            self.count += 1
        return func(*args, **(kwargs or {}))


def _cpu_attention_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_attention_backward_flops(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


# torch counts its CUDA attention kernels' FLOPs, not the CPU's flash attention: the same formulas
CPU_ATTENTION_FLOPS = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flops,
                       torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward_flops}


def count_ops(benches: list, run_step, speed: Speed) -> None:
    """Sets each bench's `ops` to what one step dispatches (OpCounter; left None when compiled) and
    its `flops` to the step's matrix-product and convolution FLOPs (FlopCounterMode), from one extra
    step, run eager: the FLOPs are the model's however it runs."""
    for b in benches:
        timed_net, b.net = b.net, b.model
        try:
            with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION_FLOPS) as flops, OpCounter() as counter:
                run_step(b)
        finally:
            b.net = timed_net
        b.flops = flops.get_total_flops()
        b.ops = None if speed.compile else counter.count


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--depth", type=int, default=20, help="PreAct-ResNet depth, 6n+2 (default 20)")
    p.add_argument("--size", type=int, default=32, help="input height = width (default 32)")
    p.add_argument("--batch", type=int, default=128, help="batch size (default 128)")
    p.add_argument("--classes", type=int, default=10, help="number of classes (default 10)")
    add_run_options(p, rounds=5, steps=2)
    p.add_argument("--channels-last", nargs="?", const="true", default="auto", choices=("auto", "true", "false"),
                   help="channels_last memory format for model and input; auto: on CUDA, as training (default auto)")
    a = p.parse_args(argv)
    for key in ("rounds", "steps", "batch", "size", "classes"):
        if getattr(a, key) < 1:
            p.error(f"--{key} must be >= 1")
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    return a


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def setup_device(opts: argparse.Namespace):
    """Apply --threads and --device; -> (device, sync), sync waiting for queued GPU work (a no-op on CPU)."""
    if opts.threads is not None:
        torch.set_num_threads(opts.threads)
    if opts.deterministic:
        devices.use_deterministic_algorithms()  # before the first matrix product (cuBLAS workspace)
    device = pick_device(opts.device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    return device, sync


def device_text(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"cpu ({cpu})"


def load_text() -> str:
    """The 1-minute load average, to judge whether other work shared the cores during the run."""
    try:
        return f", load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    except (OSError, AttributeError):
        return ""


def report_timings(benches: list, ref, rounds_done: int, opts: argparse.Namespace, t_start: float,
                   with_loss: bool = False) -> list[dict]:
    """Print the table of median and min step times relative to `ref` (and the last loss when
    `with_loss`), say when the budget stopped the rounds, and write --csv; returns the rows."""
    ref_med, ref_min = statistics.median(ref.times), min(ref.times)
    rows = []
    for b in benches:
        med = statistics.median(b.times)
        rows.append({"variant": b.label, "median_ms": med * 1e3, "min_ms": min(b.times) * 1e3, "ratio": med / ref_med,
                     "min_ratio": min(b.times) / ref_min, "params": b.params, "ops": b.ops,
                     "flops": b.flops, "flop_ratio": b.flops / ref.flops, "steps": len(b.times)})
        if with_loss:
            rows[-1]["last_loss"] = float(b.loss)

    w = max(len("variant"), *(len(r["variant"]) for r in rows))
    vs, vs_min, flop_vs = f"vs {ref.label}", f"min vs {ref.label}", f"FLOP vs {ref.label}"
    wv, wm, wf = max(8, len(vs)), max(11, len(vs_min)), len(flop_vs)
    loss_head, loss_rule = (f"  {'last loss':>9}", f"  {'-' * 9}") if with_loss else ("", "")
    print()
    print(f"{'variant':<{w}}  {'median ms':>10}  {vs:>{wv}}  {'min ms':>9}  {vs_min:>{wm}}  {'params':>10}  {'ops':>6}  "
          f"{'GFLOP':>8}  {flop_vs:>{wf}}  {'steps':>5}{loss_head}")
    print(f"{'-' * w}  {'-' * 10}  {'-' * wv}  {'-' * 9}  {'-' * wm}  {'-' * 10}  {'-' * 6}  {'-' * 8}  {'-' * wf}  "
          f"{'-' * 5}{loss_rule}")
    for r in rows:
        loss = f"  {r['last_loss']:>9.3f}" if with_loss else ""
        ops = "-" if r["ops"] is None else f"{r['ops']:,}"
        print(f"{r['variant']:<{w}}  {r['median_ms']:>10.1f}  {r['ratio']:>{wv - 1}.2f}x  {r['min_ms']:>9.1f}  "
              f"{r['min_ratio']:>{wm - 1}.2f}x  {r['params']:>10,}  {ops:>6}  {r['flops'] / 1e9:>8.3f}  {r['flop_ratio']:>{wf - 1}.3f}x  "
              f"{r['steps']:>5}{loss}")
    if rounds_done < opts.rounds:
        print(f"\nstopped after {rounds_done} of {opts.rounds} rounds: --budget {opts.budget:g} s reached")
    print(f"\ntimed phase {time.perf_counter() - t_start:.1f} s (incl. warm-up){load_text()}; "
          f"vs {ref.label} = median / median of {ref.label}; min vs {ref.label} = min / min of {ref.label}; "
          "ops = operations one step dispatches, views excluded (- when compiled); "
          f"GFLOP = the step's matrix products and convolutions, forward and backward; FLOP vs {ref.label} = their ratio")

    if opts.csv:
        with open(opts.csv, "w", newline="") as fh:
            wr = csv.DictWriter(fh, fieldnames=list(rows[0]))
            wr.writeheader()
            for r in rows:
                wr.writerow({k: f"{v:.4f}" if isinstance(v, float) else v for k, v in r.items()})
        print(f"wrote {opts.csv}")
    return rows


class Bench:
    """One variant's model, optimizer and timings."""

    def __init__(self, name: str, args: dict, opts: argparse.Namespace, speed: Speed, device: torch.device):
        self.label = residual.variant_id(name, args)
        torch.manual_seed(opts.seed)  # same initial weights for the shared layers of every variant
        model = speed.place(PreActResNet(opts.depth, opts.classes, name, args, in_channels=3), device)
        self.model = model.train()
        self.net = speed.compiled(model)  # what the step calls, as in training
        self.params = count_parameters(model)
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, **speed.optimizer_options())
        self.times: list[float] = []
        self.ops: int | None = None  # count_ops
        self.flops = 0  # count_ops


def step(b: Bench, x: torch.Tensor, y: torch.Tensor, loss_fn: nn.Module, speed: Speed) -> None:
    b.opt.zero_grad(set_to_none=True)
    with speed.autocast(x.device):
        logits = b.net(x)
    loss = loss_fn(logits.float(), y)  # fp32 loss, as in training
    loss.backward()
    b.opt.step()


def main(argv=None) -> int:
    opts = parse_args(argv)
    device, sync = setup_device(opts)
    speed = speed_from(opts, device, image_model=True)

    gen = torch.Generator().manual_seed(opts.seed)
    x = speed.layout(torch.randn(opts.batch, 3, opts.size, opts.size, generator=gen).to(device))
    y = torch.randint(0, opts.classes, (opts.batch,), generator=gen).to(device)
    loss_fn = nn.CrossEntropyLoss()

    benches = [Bench(n, a, opts, speed, device) for n, a in chosen(variants(), opts.variants, BASELINE)]
    t_start = time.perf_counter()

    print(f"resrepro step time: PreAct-ResNet-{opts.depth}, input {opts.batch}x3x{opts.size}x{opts.size}, "
          f"{opts.classes} classes, SGD momentum 0.9; one step = forward + cross-entropy + backward + optimizer step")
    print(f"date     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"torch    {torch.__version__} (python {platform.python_version()})")
    print(f"device   {device_text(device)}")
    print(f"threads  {torch.get_num_threads()}" + ("" if opts.threads is not None else " (torch default)")
          + load_text().replace(", load", "; load"))
    print(f"speed    {speed_text(speed)}")
    print(f"method   seed {opts.seed}, {opts.warmup} warm-up step(s) per variant, then {opts.rounds} round-robin "
          f"rounds x {opts.steps} step(s) per variant; median of the timed steps")
    sys.stdout.flush()

    count_ops(benches, lambda b: step(b, x, y, loss_fn, speed), speed)
    rounds_done = time_interleaved(benches, lambda b: step(b, x, y, loss_fn, speed), sync, opts, t_start)

    ref = next(b for b in benches if b.label == residual.variant_id(*BASELINE))
    report_timings(benches, ref, rounds_done, opts, t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
