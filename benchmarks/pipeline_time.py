"""Where the time of a pipeline run goes: per rule, per job, in total, and process start-up.

Reads the Snakemake log of a finished run (`.snakemake/log/*.snakemake.log`, the newest by
default) for which jobs ran, when the first started and the last finished (the run's wall time),
and where each job's Snakemake benchmark file is (every rule declares one: `benchmark:`). A job's
benchmark file gives its wall and CPU seconds (`s`, `cpu_time`); a job without one falls back to
its start and finish in the log (whole seconds). The training runs' own metrics.json give the
time inside their training loops (`wall_time_s`), so the rest of each training job (start-up,
data, final evaluation, writing) shows beside it. Process start-up is measured here: the median
time a fresh Python takes to import torch and resrepro's command line and to make its first
optimizer (which imports torch._dynamo), as every training job does, times the number of jobs
that started their own process (a job forked from the preload server did not; its log gives the
CPU seconds that Snakemake's benchmark cannot see).

    .venv/bin/python benchmarks/pipeline_time.py                      # the newest run in this folder
    .venv/bin/python benchmarks/pipeline_time.py --workdir /tmp/clone --log PATH
    .venv/bin/python benchmarks/pipeline_time.py --by-table mini     # and what each table's training costs
    .venv/bin/python benchmarks/pipeline_time.py --predict config/mini.yaml STEP_TIMES   # against the cost model

`--predict CONFIG STEP_TIMES` holds each finished training job's seconds against the cost model's
(resrepro.analysis.cost.job_seconds) for the same job, from a step-times file that
benchmarks/gpu_budget.py measured for CONFIG on this machine: whether the model holds. A job
forked from the preload server had no start of its own, so its model leaves the start out.
`--data-dir DIR` gives the model the sizes of the classification data trained on, from its
prepared files (DIR/<dataset>.pt), where they are not the real ones (the rehearsal's fake copies).

Prints figures; asserts nothing (a timed test would fail on a loaded machine).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from resrepro.preload import CHILD_USAGE  # the line a forked job's log ends with

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
STARTED = re.compile(r"^(?:local)?rule (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")
OUTPUT = re.compile(r"^\s+output: (\S+?),?(?:\s|$)")
BENCHMARK = re.compile(r"^\s+benchmark: (\S+)$")
LOG = re.compile(r"^\s+log: (\S+)$")
CHILD_CPU = re.compile(rf"^{re.escape(CHILD_USAGE)} ([\d.]+) s of CPU", re.M)
CHILD_MB = re.compile(rf"^{re.escape(CHILD_USAGE)} [\d.]+ s of CPU, ([\d.]+) MB at most", re.M)
ASKED_MB = re.compile(r"^\s+resources: .*\bmem_mb=(\d+)")
STARTUP = "import torch, resrepro.cli; torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)"


def jobs_of(log_text: str) -> list[dict]:
    """Every finished job of a Snakemake log: rule, first output, benchmark file (or None), start
    and end (datetime), and seconds between them."""
    jobs, started, now, pending = {}, {}, None, None
    for line in log_text.splitlines():
        if m := STAMP.match(line):
            now, pending = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y"), None
        elif m := STARTED.match(line):
            pending = {"rule": m.group(1), "start": now, "output": None, "benchmark": None, "log": None, "asked_mb": None}
        elif pending is not None and (m := OUTPUT.match(line)):
            pending["output"] = m.group(1)
        elif pending is not None and (m := BENCHMARK.match(line)):
            pending["benchmark"] = m.group(1)
        elif pending is not None and (m := LOG.match(line)):
            pending["log"] = m.group(1)
        elif pending is not None and (m := ASKED_MB.match(line)):
            pending["asked_mb"] = int(m.group(1))
        elif pending is not None and (m := JOBID.match(line)):
            started[m.group(1)] = pending  # its benchmark line comes after the jobid: keep filling it
        elif m := FINISHED.match(line):
            job = started.pop(m.group(1), None)
            if job is not None:
                jobs[m.group(1)] = {**job, "end": now, "seconds": (now - job["start"]).total_seconds()}
    return list(jobs.values())


def read_benchmark(path: Path) -> dict | None:
    """A Snakemake benchmark file's first row: {"s": wall seconds, "cpu_time": CPU seconds, "max_rss": MB}."""
    if not path.exists():
        return None
    with path.open() as f:
        row = next(csv.DictReader(f, delimiter="\t"), None)
    if row is None:
        return None
    def number(key: str) -> float | None:
        value = row.get(key, "")
        return float(value) if value not in ("", "NA", "-") else None

    return {"s": float(row["s"]), "cpu_time": number("cpu_time"), "max_rss": number("max_rss")}


def forked_cpu(log: Path) -> float | None:
    """CPU seconds of a job's command that ran as a fork of the preload server, from the job's log
    (Snakemake's benchmark measures only the job's own process, which waited for it); else None."""
    if not log.exists():
        return None
    m = CHILD_CPU.search(log.read_text(errors="replace"))
    return float(m.group(1)) if m else None


def forked_mb(log: Path) -> float | None:
    """The most memory (MB) a job's forked command held, from the job's log; else None."""
    if not log.exists():
        return None
    m = CHILD_MB.search(log.read_text(errors="replace"))
    return float(m.group(1)) if m else None


def with_benchmarks(jobs: list[dict], workdir: Path) -> list[dict]:
    """Each job's wall seconds from its benchmark file when it has one (else the log's), CPU
    seconds when measured (with its forked command's, when it ran as one), and its peak memory
    (the forked command's, else the benchmark's max_rss)."""
    out = []
    for job in jobs:
        bench = read_benchmark(workdir / job["benchmark"]) if job["benchmark"] else None
        forked = forked_cpu(workdir / job["log"]) if job["log"] else None
        cpu = bench["cpu_time"] if bench else None
        if forked is not None:
            cpu = (cpu or 0.0) + forked
        peak = forked_mb(workdir / job["log"]) if forked is not None else (bench["max_rss"] if bench else None)
        out.append({**job, "measured": bench is not None, "seconds": bench["s"] if bench else job["seconds"],
                    "cpu": cpu, "forked": forked is not None, "peak_mb": peak})
    return out


def memory(jobs: list[dict]) -> list[dict]:
    """Per rule: the most memory one job held and what its jobs asked for (mem_mb), with the job."""
    rows = []
    for rule in sorted({j["rule"] for j in jobs}):
        mine = [j for j in jobs if j["rule"] == rule and j["peak_mb"] is not None]
        if mine:
            top = max(mine, key=lambda j: j["peak_mb"])
            asked = [j["asked_mb"] for j in mine if j["asked_mb"] is not None]
            rows.append({"rule": rule, "peak_mb": top["peak_mb"], "asked_mb": min(asked) if asked else None, "job": top["output"]})
    return rows


def loop_seconds(job: dict, workdir: Path) -> float | None:
    """Seconds inside the training loops of a training job (its runs' metrics.json wall_time_s)."""
    out = job["output"] or ""
    if not out.endswith("trained.json") or not (workdir / out).exists():
        return None
    job_dir = (workdir / out).parent
    seeds = json.loads((workdir / out).read_text())["seeds"]
    return sum(json.loads((job_dir.parent / f"seed{s}" / "metrics.json").read_text()).get("wall_time_s", 0.0) for s in seeds)


def by_table(plan_rows: list[dict], loop_of_run: dict[str, float]) -> dict[str, float]:
    """Training-loop seconds per table: each run's split evenly among the tables whose rows name it
    (a run two tables share counts half to each); a run no table names (a figure's own) under
    "(figures only)". What a table costs, beside what its verdicts resolve, is what a cut would save."""
    tables_of: dict[str, set[str]] = {}
    for row in plan_rows:
        for run in row["runs"]:
            tables_of.setdefault(run, set()).add(row["table"])
    cost: dict[str, float] = {}
    for run, seconds in loop_of_run.items():
        owners = tables_of.get(run, {"(figures only)"})
        for owner in owners:
            cost[owner] = cost.get(owner, 0.0) + seconds / len(owners)
    return dict(sorted(cost.items(), key=lambda kv: -kv[1]))


def run_loop_seconds(results: Path) -> dict[str, float]:
    """Each finished run's training-loop seconds (metrics.json wall_time_s), by its folder under `results`."""
    return {str(m.parent.relative_to(results)): json.loads(m.read_text()).get("wall_time_s") or 0.0
            for m in results.glob("*/*/*/*/*/seed*/metrics.json")}


def startup_seconds(repeats: int) -> float:
    """Median wall time of a fresh Python starting as a training job does (STARTUP)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", STARTUP], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def predicted(jobs: list[dict], config_path: str | Path, step_times_path: str | Path,
              examples: dict[str, tuple[int, int]] | None = None) -> list[dict]:
    """Each finished training job that the cost model times: its rule, output, measured seconds
    and the model's (cost.job_seconds; without the start for a job forked from the preload server)."""
    from resrepro import layout
    from resrepro.analysis import cost
    from resrepro.analysis.disk import copies_of
    from resrepro.experiments import gpus_for

    config, plan = cost.load_scale(config_path)
    step_times = cost.load_step_times(step_times_path)
    copies = copies_of(config)
    model, start = {}, {}
    for job, seconds in cost.job_seconds(plan, config, step_times, copies, examples).items():
        output = layout.job_file("trained.json", scale=config["scale"], job=job)
        gpus = gpus_for(config, plan.runs[plan.jobs[job][0]])
        model[output], start[output] = seconds, cost.job_start_s(step_times, gpus) or 0.0
    return [{"rule": j["rule"], "output": j["output"], "measured": j["seconds"],
             "model": model[j["output"]] - (start[j["output"]] if j["forked"] else 0.0)}
            for j in jobs if j["output"] in model]


def print_predicted(rows: list[dict]) -> None:
    """Per rule and in all: the jobs' measured seconds, the model's, and measured over model."""
    if not rows:
        print("\nno finished training job that the step-times file times")
        return
    print(f"\n{'rule':24s} {'jobs':>5s} {'measured s':>11s} {'model s':>9s} {'measured/model':>15s}")
    for rule in sorted({r["rule"] for r in rows}) + ["all"]:
        mine = [r for r in rows if rule in ("all", r["rule"])]
        measured, model = sum(r["measured"] for r in mine), sum(r["model"] for r in mine)
        print(f"{rule:24s} {len(mine):5d} {measured:11.0f} {model:9.0f} {measured / model:15.2f}")
    worst = sorted(rows, key=lambda r: -abs(r["measured"] / r["model"] - 1))[:3]
    print("furthest from the model: " + "; ".join(f"{r['output']} {r['measured']:.0f} s, model {r['model']:.0f} s" for r in worst))


def table(jobs: list[dict], workdir: Path) -> list[dict]:
    """Per rule, slowest first: jobs, summed/median/longest wall seconds, CPU and in-loop seconds."""
    rows = []
    for rule in {j["rule"] for j in jobs}:
        mine = [j for j in jobs if j["rule"] == rule]
        seconds = [j["seconds"] for j in mine]
        loops = [s for s in (loop_seconds(j, workdir) for j in mine) if s is not None]
        cpus = [j["cpu"] for j in mine if j["cpu"] is not None]
        rows.append({"rule": rule, "jobs": len(mine), "sum": sum(seconds), "median": statistics.median(seconds), "max": max(seconds),
                     "cpu": sum(cpus) if cpus else None, "loop": sum(loops) if loops else None,
                     "measured": sum(j["measured"] for j in mine)})
    return sorted(rows, key=lambda r: -r["sum"])


def print_by_table(results: Path) -> None:
    import pandas as pd

    aggregate = results / "aggregate"
    cost = by_table(json.loads((results / "plan.json").read_text())["rows"], run_loop_seconds(results))
    verdicts = pd.read_csv(aggregate / "rows.csv").groupby("table")["verdict"].value_counts().unstack(fill_value=0)
    print(f"\n{'table':16s} {'loop s':>7s}  verdicts (rows.csv)")
    for table_id, seconds in cost.items():
        counts = verdicts.loc[table_id] if table_id in verdicts.index else pd.Series(dtype=int)
        said = ", ".join(f"{n} {v}" for v, n in counts.items() if n and v != "baseline")
        print(f"{table_id:16s} {seconds:7.0f}  {said}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default=".", help="the pipeline's folder (default: here)")
    p.add_argument("--log", default=None, help="a Snakemake log (default: the newest in WORKDIR/.snakemake/log)")
    p.add_argument("--startup-repeats", type=int, default=3, help="start-ups timed for the start-up figure (0: skip)")
    p.add_argument("--by-table", metavar="SCALE", help="also split the training loops' seconds among the tables of "
                   "results/SCALE (its plan.json), beside each table's verdicts (rows.csv)")
    p.add_argument("--predict", nargs=2, metavar=("CONFIG", "STEP_TIMES"),
                   help="hold the training jobs' seconds against the cost model's, from step times measured here for CONFIG")
    p.add_argument("--data-dir", help="with --predict: the prepared classification data trained on, for its sizes (the real ones without)")
    a = p.parse_args(argv)
    workdir = Path(a.workdir)
    log = Path(a.log) if a.log else max((workdir / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda f: f.stat().st_mtime)
    jobs = with_benchmarks(jobs_of(log.read_text()), workdir)
    if not jobs:
        raise SystemExit(f"{log}: no finished jobs")
    total = (max(j["end"] for j in jobs) - min(j["start"] for j in jobs)).total_seconds()
    print(f"{log}: {len(jobs)} jobs, {total / 60:.1f} min ({total:.0f} s) wall from the first start to the last finish")
    print(f"{'rule':24s} {'jobs':>5s} {'sum s':>8s} {'median s':>9s} {'max s':>7s} {'cpu s':>7s} {'in loop s':>10s}")
    for r in table(jobs, workdir):
        cpu = f"{r['cpu']:7.0f}" if r["cpu"] is not None else f"{'':>7s}"
        loop = f"{r['loop']:10.0f}" if r["loop"] is not None else f"{'':>10s}"
        note = "" if r["measured"] == r["jobs"] else f"  ({r['jobs'] - r['measured']} from the log)"
        print(f"{r['rule']:24s} {r['jobs']:5d} {r['sum']:8.0f} {r['median']:9.1f} {r['max']:7.0f} {cpu} {loop}{note}")
    job_seconds = sum(j["seconds"] for j in jobs)
    print(f"{'all':24s} {len(jobs):5d} {job_seconds:8.0f}  (jobs run in parallel: their seconds add up to more than the wall time)")
    print("seconds are each job's Snakemake benchmark file (wall `s`, `cpu_time`); in loop: the training runs' own "
          "epoch/update time (metrics.json wall_time_s); the rest of a job is start-up, data, evaluation, writing")
    forked = sum(j["forked"] for j in jobs)
    cpu = sum(j["cpu"] for j in jobs if j["cpu"] is not None)
    print(f"CPU: {cpu:.0f} s in all; {forked} of {len(jobs)} jobs ran as forks of the preload server (no start-up of their own)")
    print(f"\n{'rule':24s} {'peak MB':>8s} {'asked MB':>9s}  (the job that peaked; a forked job's peak is its command's)")
    for r in memory(jobs):
        asked = f"{r['asked_mb']:9d}" if r["asked_mb"] is not None else f"{'':>9s}"
        print(f"{r['rule']:24s} {r['peak_mb']:8.0f} {asked}  {r['job']}")
    if a.by_table:
        print_by_table(workdir / "results" / a.by_table)
    if a.predict:
        from resrepro.data.images import prepared_sizes

        print_predicted(predicted(jobs, *a.predict, prepared_sizes(a.data_dir) if a.data_dir else None))
    if a.startup_repeats > 0:
        startup, starting = startup_seconds(a.startup_repeats), len(jobs) - forked
        print(f"process start-up: {startup:.1f} s per job (median of {a.startup_repeats} fresh starts: torch, resrepro.cli, "
              f"a first optimizer), {startup * starting:.0f} s of job time over the {starting} jobs that started their own "
              f"({100 * startup * starting / job_seconds:.0f}% of it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
