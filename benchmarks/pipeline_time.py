"""Where the time of a pipeline run goes: per rule, per job, in total, and process start-up.

Reads the Snakemake log of a finished run (`.snakemake/log/*.snakemake.log`, the newest by
default): each job's start and finish times give its wall time. The training jobs' own
metrics.json give the time spent inside their training loops (`wall_time_s`), so the rest of
each training job (start-up, data loading, final evaluation, writing) is shown beside it. Process
start-up is measured here: the median time a fresh Python takes to import torch and resrepro's
command line, as every job does, times the number of jobs.

    .venv/bin/python benchmarks/pipeline_time.py                      # the newest run in this folder
    .venv/bin/python benchmarks/pipeline_time.py --workdir /tmp/clone --log PATH --scale mini

Prints figures; asserts nothing (a timed test would fail on a loaded machine).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
STARTED = re.compile(r"^(?:local)?rule (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")
OUTPUT = re.compile(r"^\s+output: (\S+?),?(?:\s|$)")


def jobs_of(log_text: str) -> list[dict]:
    """Every finished job of a Snakemake log: rule, first output, start and end (datetime)."""
    jobs, started, now, pending = {}, {}, None, None
    for line in log_text.splitlines():
        if m := STAMP.match(line):
            now = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
        elif m := STARTED.match(line):
            pending = {"rule": m.group(1), "start": now, "output": None}
        elif pending is not None and (m := OUTPUT.match(line)):
            pending["output"] = m.group(1)
        elif pending is not None and (m := JOBID.match(line)):
            started[m.group(1)], pending = pending, None
        elif m := FINISHED.match(line):
            job = started.pop(m.group(1), None)
            if job is not None:
                jobs[m.group(1)] = {**job, "end": now, "seconds": (now - job["start"]).total_seconds()}
    return list(jobs.values())


def startup_seconds(repeats: int) -> float:
    """Median wall time of a fresh Python importing torch and resrepro's command line."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch, resrepro.cli"], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", default=".", help="the pipeline's folder (default: here)")
    p.add_argument("--log", default=None, help="a Snakemake log (default: the newest in WORKDIR/.snakemake/log)")
    p.add_argument("--startup-repeats", type=int, default=3, help="imports timed for the start-up figure (0: skip)")
    a = p.parse_args(argv)
    workdir = Path(a.workdir)
    log = Path(a.log) if a.log else max((workdir / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda f: f.stat().st_mtime)
    jobs = jobs_of(log.read_text())
    if not jobs:
        raise SystemExit(f"{log}: no finished jobs")
    total = (max(j["end"] for j in jobs) - min(j["start"] for j in jobs)).total_seconds()
    print(f"{log}: {len(jobs)} jobs, {total / 60:.1f} min wall from the first start to the last finish")
    print(f"{'rule':24s} {'jobs':>5s} {'sum s':>8s} {'median s':>9s} {'max s':>7s} {'in loop s':>10s}")
    for rule in sorted({j["rule"] for j in jobs}, key=lambda r: -sum(j["seconds"] for j in jobs if j["rule"] == r)):
        mine = [j for j in jobs if j["rule"] == rule]
        seconds = [j["seconds"] for j in mine]
        in_loop = [json.loads((workdir / j["output"]).read_text()).get("wall_time_s", 0.0) for j in mine
                   if j["output"] and j["output"].endswith("metrics.json") and (workdir / j["output"]).exists()]
        loop_text = f"{sum(in_loop):10.0f}" if in_loop else f"{'':>10s}"
        print(f"{rule:24s} {len(mine):5d} {sum(seconds):8.0f} {statistics.median(seconds):9.1f} {max(seconds):7.0f} {loop_text}")
    print(f"{'all':24s} {len(jobs):5d} {sum(j['seconds'] for j in jobs):8.0f}  (job seconds overlap: jobs run in parallel)")
    print("in loop: the training jobs' own epoch/update time (metrics.json wall_time_s); the rest of a job is start-up, data, evaluation, writing")
    if a.startup_repeats > 0:
        startup = startup_seconds(a.startup_repeats)
        print(f"process start-up: {startup:.1f} s per job (median of {a.startup_repeats} imports of torch and resrepro.cli, now), "
              f"{startup * len(jobs) / 60:.1f} min of job time over {len(jobs)} jobs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
