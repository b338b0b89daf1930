"""The rehearsal (config/rehearsal.yaml) on one CUDA GPU: every rule's command as a GPU job runs it.

`make rehearsal` runs on CPUs; on a GPU the same DAG runs with `gpus_per_job=1` and one GPU for
Snakemake to hand out (`--resources gpu=1`), WMT's two DDP ranks cut to one (one GPU holds one
rank). Two phases, each stopped at its deadline (SIGTERM to Snakemake, which ends its jobs):
- `--cover`: the few targets that between them run every rule once, paper-size models first
  (the base Transformer, ResNet-110's shared nets, the captioner on ResNet-101 features);
- otherwise the whole DAG to the report, keeping what the first phase made.
`--keep-going` throughout: one rule that fails (captioning's METEOR needs Java, which the GPU
machine may lack) does not hide how the others fare.

Afterwards it prints, and writes to OUT/rehearsal-<phase>.txt, the jobs each rule finished and
failed, benchmarks/pipeline_time.py's figures for the run, and the disk the results take; the
Snakemake log goes to OUT too. `--predict`, after the phases on the same machine, holds the cost
model against them: it writes the rehearsal's config as it ran here (OUT/rehearsal-gpu.yaml),
measures its step times on this GPU on batches shaped as its fake data (benchmarks/gpu_budget.py,
OUT/rehearsal-steps.yaml, stopped at the deadline with the keys it has), and puts each finished training job of each phase's log beside
the model's seconds for it (pipeline_time.py --predict, with the fake data's sizes), into
OUT/rehearsal-predict.txt. Run by benchmarks/gpu_session.py (checks `rehearsal-cover`,
`rehearsal`), which sets GPU_CHECK_LIMIT_S; from the repository root, where torch sees the GPU:

    python3 benchmarks/gpu_rehearsal.py --cover --out OUT [--cores 16] [--deadline 300]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from resrepro.rehearsal import EVERY_RULE_ONCE

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path("results/rehearsal")
# one GPU: every compute job holds it; WMT's DDP ranks become one (two ranks cannot share a GPU under NCCL)
# and the captioners train though the machine may lack Java (evaluate_captioning then fails alone)
GPU_CONFIG = ("gpus_per_job=1", "translation={gpus: {wmt14_en_de: 1, wmt14_en_fr: 1}}", "check_scorers=false")
FINISHED = re.compile(r"^Finished jobid: \d+ \(Rule: (\w+)\)$")
FAILED = re.compile(r"^Error in rule (\w+):$")


def resrepro_on_path(python: str) -> str:
    """A folder with a `resrepro` command for this Python (the rules call `resrepro`; the GPU machine
    runs the package from src/ without installing it)."""
    folder = Path(tempfile.mkdtemp(prefix="resrepro-bin-"))
    script = folder / "resrepro"
    script.write_text(f'#!/bin/sh\nexec "{python}" -m resrepro.cli "$@"\n')
    script.chmod(0o755)
    return str(folder)


def command(cover: bool, cores: int, python: str = sys.executable) -> list[str]:
    # --config and --resources take every word up to the next option: the targets follow a flag
    return [python, "-m", "resrepro.cli", "rehearse", "--config", *GPU_CONFIG, "--resources", "gpu=1", "--cores", str(cores),
            "--keep-going", *(EVERY_RULE_ONCE if cover else ())]


def merged(old, new):
    """`new` over `old`, a mapping into a mapping, as Snakemake merges --config into the config file."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {**old, **{key: merged(old.get(key), value) for key, value in new.items()}}
    return new


def gpu_config(path: Path = ROOT / "config" / "rehearsal.yaml") -> dict:
    """The rehearsal's config as it runs on one GPU: the file with GPU_CONFIG over it."""
    import yaml

    config = yaml.safe_load(path.read_text())
    for item in GPU_CONFIG:
        key, value = item.split("=", 1)
        config[key] = merged(config.get(key), yaml.safe_load(value))
    return config


def predict(out: Path, deadline_s: float) -> str:
    """The cost model against the rehearsal's finished training jobs on this GPU (module docstring)."""
    config, config_path, steps = gpu_config(), out / "rehearsal-gpu.yaml", out / "rehearsal-steps.yaml"
    config_path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    budget = [sys.executable, str(ROOT / "benchmarks" / "gpu_budget.py"), "--config", str(config_path), "--device", "cuda",
              "--warmup", "3", "--steps", "10", "--skip", "*/nondeterministic", "--data-dir", config["data_dir"], "--out", str(steps)]
    how, seconds = run(budget, deadline_s, out / "rehearsal-steps.console.log")
    said = [f"step times of the rehearsal's keys on this GPU: {how}, {seconds:.0f} s"]
    for log in sorted(out.glob("rehearsal-*.snakemake.log")):
        figures = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pipeline_time.py"), "--startup-repeats", "0", "--log", str(log),
                                  "--predict", str(config_path), str(steps), "--data-dir", config["data_dir"]],
                                 cwd=ROOT, capture_output=True, text=True, timeout=120)
        said += [f"\n{log.name}:", figures.stdout, figures.stderr[-2000:]]
    return "\n".join(said)


def run(argv: list[str], deadline_s: float, log_path: Path) -> tuple[str, float]:
    """Runs `argv` in its own process group, its output to the console and `log_path`; at the
    deadline sends SIGTERM (Snakemake ends its jobs and writes its log), then SIGKILL 30 s later."""
    started = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

        def copy():
            for line in proc.stdout:
                sys.stdout.write(line)
                log.write(line)

        reader = threading.Thread(target=copy, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=deadline_s)
            stopped = False
        except subprocess.TimeoutExpired:
            stopped = True
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        reader.join(timeout=10)
    seconds = time.monotonic() - started
    if stopped:
        return f"stopped at its deadline ({deadline_s:.0f} s)", seconds
    return ("ok" if proc.returncode == 0 else f"exit {proc.returncode}"), seconds


def job_counts(log_text: str) -> tuple[Counter, Counter]:
    """(jobs finished, jobs failed) per rule, from a Snakemake log."""
    finished, failed = Counter(), Counter()
    for line in log_text.splitlines():
        if m := FINISHED.match(line):
            finished[m.group(1)] += 1
        elif m := FAILED.match(line):
            failed[m.group(1)] += 1
    return finished, failed


def disk_by_folder(root: Path) -> dict[str, int]:
    sizes = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else ():
        sizes[folder.name] = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    return sizes


def summary(phase: str, how: str, seconds: float, log_text: str, timing: str) -> str:
    finished, failed = job_counts(log_text)
    lines = [f"rehearsal on CUDA, phase {phase}: {how}, {seconds:.0f} s wall",
             f"jobs finished {sum(finished.values())}, failed {sum(failed.values())}"]
    lines += [f"  {rule}: {finished[rule]} finished, {failed[rule]} failed" for rule in sorted(finished | failed)]
    lines += [f"disk {name}: {size / 1e9:.2f} GB" for name, size in disk_by_folder(ROOT / RESULTS).items()]
    errors = [line for line in log_text.splitlines() if re.search(r"Error|error:|Traceback|RuntimeError|CUDA", line)]
    lines += ["first error lines:", *errors[:40]] if errors else []
    return "\n".join(lines) + "\n\n" + timing


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cover", action="store_true", help="only the targets that run every rule once")
    p.add_argument("--predict", action="store_true", help="after the phases: the cost model against their training jobs")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-session")))
    p.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)), help="default: the CPUs this process may use")
    p.add_argument("--deadline", type=float, default=float(os.environ.get("GPU_CHECK_LIMIT_S", 540)) - 45,
                   help="seconds before Snakemake is stopped (default: the check's limit less 45 s for the summary)")
    opts = p.parse_args(argv)

    phase = "cover" if opts.cover else "all"
    opts.out.mkdir(parents=True, exist_ok=True)
    os.environ["PATH"] = resrepro_on_path(sys.executable) + os.pathsep + os.environ["PATH"]
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    if opts.predict:
        text = predict(opts.out, opts.deadline)
        print(text)
        (opts.out / "rehearsal-predict.txt").write_text(text)
        return 0
    print(f"java: {shutil.which('java') or 'not on PATH (METEOR and the PTB tokenizer will fail)'}")
    logs_before = set((ROOT / ".snakemake" / "log").glob("*.snakemake.log"))
    how, seconds = run(command(opts.cover, opts.cores), opts.deadline, opts.out / f"rehearsal-{phase}.console.log")
    new_logs = sorted(set((ROOT / ".snakemake" / "log").glob("*.snakemake.log")) - logs_before)
    log_text = "".join(path.read_text(errors="replace") for path in new_logs)
    for path in new_logs:
        shutil.copy(path, opts.out / f"rehearsal-{phase}.snakemake.log")
    timing = ""
    if new_logs:
        timing = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pipeline_time.py"), "--startup-repeats", "0",
                                 "--log", str(new_logs[-1])], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    text = summary(phase, how, seconds, log_text, timing)
    print(text)
    (opts.out / f"rehearsal-{phase}.txt").write_text(text)
    return 0 if how == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
