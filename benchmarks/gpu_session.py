"""The checks only a GPU can run, in one command that fits a short loan of one GPU.

A GPU comes for minutes at a time, so the pending checks are written down here once, in order of
what they decide, each with its own time limit:
- `steps`: SAS's step cost on the base Transformer's width against post-LN, with the gates' float32
  products in IEEE float32, then in TF32, then compiled; and on PreAct-ResNet-20, compiled, eager,
  then replayed as CUDA graphs (issue 11, item 3; measured on an H100 on 2026-11-26); and the
  Transformer replayed as CUDA graphs, then compiled and replayed as graphs (`reduce-overhead`);
- `paper-steps`: the paper's CIFAR step (ResNet-110, deterministic), eager, as CUDA graphs, then
  compiled by inductor and replayed as graphs (`reduce-overhead`);
- `costs`: the step times of every run of the paper and gpu-day scales and each classification
  run's evaluation batch, one session's, into a new step-times file; `costs-shared` adds the
  paper's CIFAR steps as its jobs train them, 4 runs side by side as processes (`costs-shared-day`
  gpu-day's 2), and `costs-stacked` the classification steps of 5 runs stacked, to that file;
- `stacked`: K ResNet-110 runs stacked as one program against one alone, eager, as CUDA graphs and
  compiled (issue 45, item 1; measured on an H200 on 2026-11-27: docs/gpu-h200-2026-11-27-stacked.md);
- `share`: the images/s of 1, 4, 5 and 8 ResNet-110 runs side by side as processes (the scales'
  `seeds_in_parallel`);
- `graphs-auto`: the GPU tests of `compile: auto` alone (every kind of image model the papers
  train, as CUDA graphs against eager), then `tests`: the GPU test suite (`pytest -m gpu`);
- `rehearsal`: the rehearsal scale's DAG on CUDA (benchmarks/gpu_rehearsal.py): the targets that
  run every rule once, then as much of the whole DAG as the time left allows; then
  `rehearsal-predict`, on the same machine, the cost model against its training jobs.

No check starts when less than `--min-left` seconds of `--limit` remain, and each is stopped at
its own limit or at `--limit`, whichever comes first. Every line goes to the console and to
OUT/session.log; the step-times file, when re-measured, is copied to OUT (partial, as its source
says, when its check was stopped at a limit); the last lines say how each check ended. Run from the repository root, where torch sees the GPU:

    PYTHONUNBUFFERED=1 python3 benchmarks/gpu_session.py --out OUT [--wheels .whl] [--limit 540] [--only steps costs tests]

`--checks NAME ...` runs named checks in the order given instead, which is what a loan's last
minutes fit. On an H100 on 2026-11-26: costs 73 s, tests 171 s, the steps 81 + 15 + 74 + 26 + 14 +
12 s, the paper steps about 60 s (docs/gpu-h100-2026-11-26.md). On an H200 on 2026-11-27 all 34
GPU tests passed, the CUDA-graph training among them (docs/gpu-h200-2026-11-27.md). What a loan
still has to decide (docs/gpu-h200-2026-11-27-costs.md): the GPU tests of stacked training since
its fixes (`stacked-modes`, `stacked-tests`), one session's step times with dynamo reset for each
key (`costs`, then the paper's CIFAR runs 4 to a GPU, `costs-shared`, and `costs-stacked` with that
file at hand), SAS stacked and compiled (its compile
outlasted 235 s on 2026-11-27), and what inductor's graphs save on the paper's step alone
(`--only paper-steps`).

The package runs from src/ (no install needed). Packages that the machine lacks travel as wheels:
`make gpu-wheels` (here, with the internet) downloads them into .whl/ at this venv's versions, for
the GPU machine's Python; `--wheels .whl` installs them there into a folder of their own before the
preflight, which says what is still missing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# where the `costs` check writes every step time of one session (a new file: a step-times file holds one session's)
STEP_TIMES = "config/costs/gpu-session.yaml"


@dataclass(frozen=True)
class Check:
    name: str
    group: str
    limit_s: int
    argv: tuple[str, ...]  # after the Python interpreter


# A GPU step takes milliseconds: 10 timed steps a round instead of the CPU's 1-2. The budget
# (seconds for warm-up and rounds) leaves a compiled run time to compile each model in its warm-up.
GPU_STEPS = ("--device", "cuda", "--variants", "sas", "highway", "--warmup", "3", "--steps", "10")
# the paper's CIFAR step: ResNet-110, batch 128, the recipe's deterministic mode; a step takes 50-250 ms
PAPER_RESNET = ("--device", "cuda", "--depth", "110", "--deterministic", "--variants", "sas", "--warmup", "3", "--steps", "5")


def _transformer(budget: int, *extra: str) -> tuple[str, ...]:
    return ("benchmarks/transformer_step_time.py", *GPU_STEPS, "--budget", str(budget), *extra)


def _resnet(budget: int, *extra: str, steps: tuple[str, ...] = GPU_STEPS) -> tuple[str, ...]:
    return ("benchmarks/step_time.py", *steps, "--budget", str(budget), *extra)


CHECKS = (
    # eager, a GPU step of 10 timed steps a round takes a second: 20 s of rounds is several rounds
    Check("transformer-ieee", "steps", 60, _transformer(20, "--tf32", "false")),
    Check("transformer-tf32", "steps", 60, _transformer(20, "--tf32", "true")),
    # eager, SAS's ResNet step is its operations' launches (1,024 against add's 300 in bf16: the
    # ops column; the H100's eager ratio, 3.3x, is their ratio): compiled, they fuse
    Check("resnet-compiled", "steps", 200, _resnet(150, "--compile")),
    Check("transformer-compiled", "steps", 240, _transformer(180, "--compile")),
    Check("resnet", "steps", 60, _resnet(20)),
    # CUDA graphs replay a step's launches as one: the host's cost per operation, without fusing
    Check("resnet-cudagraphs", "steps", 120, _resnet(60, "--compile", "cudagraphs")),
    # the Transformer bench's shapes are fixed, as length_bucket makes a run's: its step replayed as graphs,
    # the same kernels, then inductor's
    Check("transformer-cudagraphs", "steps", 120, _transformer(60, "--compile", "cudagraphs")),
    Check("transformer-reduce-overhead", "steps", 240, _transformer(180, "--compile", "reduce-overhead")),
    # the paper's CIFAR step, eager then as CUDA graphs: on 2026-11-26 SAS took 223 ms eager and 63 ms as graphs, add 49 and 27 (docs/gpu-h100-2026-11-26.md)
    Check("resnet110", "paper-steps", 60, _resnet(25, steps=PAPER_RESNET)),
    Check("resnet110-cudagraphs", "paper-steps", 150, _resnet(110, "--compile", "cudagraphs", steps=PAPER_RESNET)),
    # inductor's fused kernels replayed as graphs: what may bring SAS within item 3's 1.25x
    Check("resnet110-reduce-overhead", "paper-steps", 240, _resnet(200, "--compile", "reduce-overhead", steps=PAPER_RESNET)),
    # issue 45, item 1: K paper-step runs stacked as one program, eager and as CUDA graphs, per run against one alone
    Check("stacked", "stacked", 300, ("benchmarks/stacked_step_time.py", "--device", "cuda", "--depth", "110", "--runs", "1", "4", "8", "16",
                                      "--variants", "add", "sas", "--budget", "240")),
    # what stacking leaves: inductor's fusions at 16 runs, and one run at 16 runs' images (the arithmetic without grouping)
    Check("stacked-compiled", "stacked", 330, ("benchmarks/stacked_step_time.py", "--device", "cuda", "--depth", "110", "--runs", "16",
                                               "--variants", "add", "sas", "--modes", "compiled", "compiled-graphs", "--budget", "270")),
    # the paper recipes train deterministic: grouped convolutions' deterministic kernels may cost more
    Check("stacked-deterministic", "stacked", 150, ("benchmarks/stacked_step_time.py", "--device", "cuda", "--depth", "110", "--runs", "1", "16",
                                                    "--variants", "add", "sas", "--modes", "eager", "graphs", "--deterministic", "--budget", "120")),
    Check("stacked-one-batch", "stacked", 90, ("benchmarks/stacked_step_time.py", "--device", "cuda", "--depth", "110", "--runs", "1",
                                               "--batch", "2048", "--variants", "add", "sas", "--modes", "eager", "graphs", "--budget", "60")),
    # issue 45, item 1: how many ResNet-110 runs to put on a GPU as processes (the scales' seeds_in_parallel: 4, the most
    # measured; 5 would train a paper cell's 5 seeds in one job)
    Check("share-110", "share", 150, ("benchmarks/gpu_share.py", "--device", "cuda", "--depth", "110", "--runs", "1", "4", "5", "8",
                                      "--seconds", "8", "--warmup", "10")),
    # every step time of the paper and gpu-day configs, each classification run's evaluation batch and each task's
    # busiest key again with deterministic kernels off (/nondeterministic), in this one session (the report's GPU-hours)
    Check("costs", "costs", 480, ("benchmarks/gpu_budget.py", "--device", "cuda", "--warmup", "3", "--steps", "10", "--skip", "*/processes*",
                                  "--out", STEP_TIMES)),
    # then, into the same session's file, the paper's CIFAR steps as its jobs train them: 4 runs side by side as processes
    # (seeds_in_parallel), each timed while the other 3 step (102 keys), then gpu-day's 2 side by side
    Check("costs-shared", "costs", 420, ("benchmarks/gpu_budget.py", "--device", "cuda", "--warmup", "3", "--steps", "10",
                                         "--keys", "*/processes4", "--out", STEP_TIMES)),
    Check("costs-shared-day", "costs", 360, ("benchmarks/gpu_budget.py", "--device", "cuda", "--warmup", "3", "--steps", "10",
                                             "--keys", "*/processes2", "--out", STEP_TIMES)),
    # then, into the same session's file, each classification step with a paper cell's 5 seeds stacked, in the
    # recipes' deterministic mode (iter-t1's 4 seeds stay costed alone, and stacked evaluation as alone: upper bounds)
    Check("costs-stacked", "costs", 360, ("benchmarks/gpu_budget.py", "--device", "cuda", "--warmup", "2", "--steps", "5", "--stacked", "5",
                                          "--keys", "*/batch*/stacked*", "--out", STEP_TIMES)),
    # the paper recipes' `compile: auto`: every kind of image model the papers train, as CUDA graphs against eager
    Check("graphs-auto", "tests", 300, ("-m", "pytest", "-m", "gpu", "-rA", "tests/test_gpu.py", "-k", "compile_auto")),
    # which layouts, deterministic modes and compile modes a stack trains in on this GPU (a tiny net: seconds)
    Check("stacked-modes", "tests", 90, ("benchmarks/stacked_modes.py", "--device", "cuda")),
    # seeds stacked as one program on CUDA, eager and as graphs, against each trained alone (seeds_stacked)
    Check("stacked-tests", "tests", 180, ("-m", "pytest", "-m", "gpu", "-rA", "tests/test_gpu.py", "-k", "stacked")),
    Check("tests", "tests", 420, ("-m", "pytest", "-m", "gpu", "-rA", "tests/test_gpu.py")),
    # the rehearsal's DAG on CUDA (issue 42, item 4): every rule once, then as much of the whole DAG as is left
    Check("rehearsal-cover", "rehearsal", 330, ("benchmarks/gpu_rehearsal.py", "--cover")),
    Check("rehearsal", "rehearsal", 600, ("benchmarks/gpu_rehearsal.py",)),
    # after the rehearsal, on the same machine: its keys' step times here, and each training job against the cost model's
    # time for it (issue 45, item 4: within 20%)
    Check("rehearsal-predict", "rehearsal", 420, ("benchmarks/gpu_rehearsal.py", "--predict")),
)
GROUPS = tuple(dict.fromkeys(c.group for c in CHECKS))
# What the GPU machine's image lacks of what the checks import: sacremoses (the GPU tests' tokenizer)
# and Snakemake with its dependencies (the rehearsal), at this venv's versions, less what the image
# has (its package list), so that one version of each is installed there.
GPU_WHEELS = ("sacremoses", "snakemake")
GPU_IMAGE_HAS = frozenset({"attrs", "certifi", "charset-normalizer", "click", "cloudpickle", "idna", "jinja2", "joblib", "markupsafe",
                           "packaging", "psutil", "pyyaml", "regex", "requests", "tabulate", "tqdm", "typing-extensions",
                           "urllib3", "wrapt"})
GPU_PYTHON = "3.12"
GPU_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                 "manylinux_2_5_x86_64", "manylinux1_x86_64")
# What the checks import beyond the standard library (the GPU tests' translation runs tokenize
# with sacremoses and score with sacrebleu); the machine's own torch is used.
NEEDS = ("torch", "numpy", "yaml", "pandas", "scipy", "sklearn", "tqdm", "pytest", "sacrebleu", "sacremoses",
         "resrepro.experiments", "resrepro.analysis.cost", "resrepro.models", "snakemake", "sentencepiece", "matplotlib", "jinja2")


def environment(site: Path | None = None) -> dict:
    """The checks' environment: the package from src/, the benchmarks importable by each other,
    and the wheels installed into `site`, if any."""
    parts = [str(ROOT / "src"), str(ROOT / "benchmarks"), *([str(site)] if site else []), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(parts).rstrip(os.pathsep), "PYTHONUNBUFFERED": "1"}


def wheel_command(dest: Path, python: str = sys.executable) -> list[str]:
    """pip's command that puts GPU_WHEELS and their dependencies, as wheels, into `dest`: those on
    the index as they are, those published as sources only (connection_pool) built here."""
    from importlib.metadata import version

    return [python, "-m", "pip", "wheel", "--quiet", "-w", str(dest), *(f"{name}=={version(name)}" for name in GPU_WHEELS)]


def _project(wheel: Path) -> str:
    return re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()


def for_gpu_python(dest: Path) -> list[str]:
    """Drops from `dest` the wheels of what the image has and the ones built for this machine's
    Python (compiled: they would not load on the GPU machine's); returns those as name==version,
    to be downloaded again for its Python."""
    again = []
    for wheel in sorted(dest.glob("*.whl")):
        if _project(wheel) in GPU_IMAGE_HAS:
            wheel.unlink()
        elif not wheel.name.endswith("-none-any.whl"):
            again.append(f"{_project(wheel)}=={wheel.name.split('-')[1]}")
            wheel.unlink()
    return again


def download_command(dest: Path, names: list[str], python: str = sys.executable) -> list[str]:
    """pip's command that downloads `names` built for the GPU machine's Python: binary wheels
    only, no dependencies (the first step resolved them)."""
    platforms = [arg for name in GPU_PLATFORMS for arg in ("--platform", name)]
    return [python, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version", GPU_PYTHON,
            "--implementation", "cp", *platforms, "-d", str(dest), *names]


def download_wheels(dest: Path) -> int:
    if code := subprocess.run(wheel_command(dest)).returncode:
        return code
    again = for_gpu_python(dest)
    return subprocess.run(download_command(dest, again)).returncode if again else 0


def install_wheels(wheels: Path, site: Path | None = None, python: str = sys.executable) -> Path:
    """Installs every wheel in `wheels` offline into `site` (default: a new temporary folder);
    returns the folder (for PYTHONPATH).
    Raises SystemExit with pip's message when the folder holds none or pip fails."""
    found = sorted(wheels.glob("*.whl"))
    if not found:
        raise SystemExit(f"--wheels {wheels}: no .whl files there (make gpu-wheels downloads them)")
    site = site or Path(tempfile.mkdtemp(prefix="gpu-session-site-"))
    proc = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
                           "--no-cache-dir", "--target", str(site), *map(str, found)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"installing {', '.join(w.name for w in found)} failed: {proc.stderr.strip()[-500:]}")
    return site


def preflight(env: dict, python: str = sys.executable) -> str | None:
    """None when every module the checks import loads; otherwise what is missing, said plainly."""
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)"
    proc = subprocess.run([python, "-c", code, *NEEDS], env=env, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return f"cannot import what the checks need: {last}. Install the missing packages (e.g. as wheels) and run again."


def run_check(check: Check, limit_s: float, log, env: dict, python: str = sys.executable) -> tuple[str, float]:
    """Runs one check, copying its output line by line to the console and `log`; stops its whole
    process group at `limit_s` (pytest and torchrun start processes of their own). Returns how it
    ended ("ok", "failed (exit N)" or "stopped at N s") and its seconds."""
    started = time.monotonic()
    proc = subprocess.Popen([python, *check.argv], cwd=ROOT, env={**env, "GPU_CHECK_LIMIT_S": f"{limit_s:.0f}"}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    timed_out = threading.Event()

    def stop():
        timed_out.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(limit_s, stop)
    timer.start()
    try:
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        proc.wait()
    finally:
        timer.cancel()
    seconds = time.monotonic() - started
    if timed_out.is_set():
        return f"stopped at {limit_s:.0f} s", seconds
    return ("ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"), seconds


def run_session(checks, out: Path, limit_s: float, min_left_s: float, env: dict, python: str = sys.executable,
                header: str = "") -> list[tuple[str, str, float]]:
    """Runs `checks` in order within `limit_s`; returns (name, how it ended, seconds) of each."""
    out.mkdir(parents=True, exist_ok=True)
    started, results = time.monotonic(), []
    with open(out / "session.log", "a", encoding="utf-8") as log:
        log.write(header + "\n")
        for check in checks:
            left = limit_s - (time.monotonic() - started)
            if left < min_left_s:
                results.append((check.name, f"not started ({left:.0f} s left)", 0.0))
                continue
            banner = f"\n=== {check.name}: python {' '.join(check.argv)} (limit {min(check.limit_s, left):.0f} s)\n"
            sys.stdout.write(banner)
            log.write(banner)
            log.flush()
            how, seconds = run_check(check, min(check.limit_s, left), log, env, python)
            results.append((check.name, how, seconds))
            # a cost check stopped at its limit leaves the keys it measured, its file's source says partial
            if check.group == "costs" and (how == "ok" or how.startswith("stopped")) and (ROOT / STEP_TIMES).exists():
                shutil.copy(ROOT / STEP_TIMES, out / Path(STEP_TIMES).name)
        summary = "\n=== summary\n" + "".join(f"{name}: {how}, {seconds:.0f} s\n" for name, how, seconds in results)
        sys.stdout.write(summary)
        log.write(summary)
    return results


def chosen_checks(groups, names=None) -> list[Check]:
    """The checks of `groups` in CHECKS' order, or, when `names` are given, those checks in that order."""
    if names:
        by_name = {c.name: c for c in CHECKS}
        return [by_name[name] for name in names]
    return [c for c in CHECKS if c.group in groups]


def device_header(python: str = sys.executable) -> str:
    code = ("import torch, platform; print('torch', torch.__version__, 'python', platform.python_version()); "
            "print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device')")
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return (proc.stdout + proc.stderr).strip()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-session")), help="where the log goes (default $OUT)")
    p.add_argument("--limit", type=float, default=540, help="seconds for all the checks together (default 540)")
    p.add_argument("--min-left", type=float, default=60, help="start no check with fewer seconds left (default 60)")
    p.add_argument("--only", nargs="+", choices=GROUPS, default=list(GROUPS), help="the groups to run, in their order above")
    p.add_argument("--checks", nargs="+", choices=[c.name for c in CHECKS],
                   help="run only these checks, in the order given (instead of --only's groups): what a loan's last minutes fit")
    p.add_argument("--wheels", type=Path, help="install the wheels in this folder first (e.g. .whl from `make gpu-wheels`)")
    p.add_argument("--download-wheels", type=Path, metavar="DIR",
                   help="only download the wheels the GPU machine lacks into DIR (run here, with the internet), then stop")
    opts = p.parse_args(argv)

    if opts.download_wheels:
        return download_wheels(opts.download_wheels)
    env = environment(install_wheels(opts.wheels) if opts.wheels else None)
    problem = preflight(env)
    header = device_header()
    print(header)
    if problem or "no CUDA device" in header:
        print(problem or "no CUDA device: these checks need one", file=sys.stderr)
        return 2
    results = run_session(chosen_checks(opts.only, opts.checks), opts.out, opts.limit, opts.min_left, env, header=header)
    return 0 if all(how == "ok" for _, how, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
