"""How many CIFAR epochs the gpu-day scale can train in its day (issue 45, item 5).

gpu-day trains every table on one GPU in a day with recipes cut from the papers'; CIFAR's cut is
its epochs (12 of the papers' 164). This prints the scale's GPU-hours (analysis/cost.py, from a
step-times file) at each candidate number of epochs, the learning-rate milestones kept at the
papers' fractions (81 and 122 of 164), and the most epochs whose total fits the budget:

    .venv/bin/python benchmarks/gpu_day_fit.py --step-times config/costs/gpu-session.yaml --hours 24

A GPU-hour shared by P runs side by side counts a P-th to each run where the file has their
shared step times (cost.sharing); without them each run counts as alone, and the fit is then a
lower bound on the epochs that fit. Translation and captioning keep their recipes.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import yaml

from resrepro.analysis import cost
from resrepro.experiments import make_plan

# He et al. 2016b's CIFAR schedule, which both papers' tables train: 164 epochs, the rate divided at 81 and 122
PAPER_EPOCHS, PAPER_MILESTONES = 164, (81, 122)


def at_epochs(config: dict, epochs: int) -> dict:
    """The scale with CIFAR trained for `epochs`, its milestones at the papers' fractions of them."""
    out = copy.deepcopy(config)
    out["classification"]["epochs"] = epochs
    out["classification"]["lr_milestones"] = sorted({max(1, round(epochs * m / PAPER_EPOCHS)) for m in PAPER_MILESTONES})
    return out


def total_hours(config: dict, step_times: dict) -> float:
    """The scale's GPU-hours: every run of its tables once (cost.table_costs' total)."""
    return float(cost.table_costs(make_plan(config), config, step_times).set_index("table").loc["total", "gpu_hours"])


def most_epochs(config: dict, step_times: dict, hours: float, low: int, high: int = PAPER_EPOCHS) -> tuple[int, dict[int, float]]:
    """The most epochs in [low, high] whose total fits `hours` (the scale's hours grow with the
    epochs: a bisection), and the totals it computed; `low - 1` when even `low` does not fit."""
    totals = {}

    def fits(epochs: int) -> bool:
        totals[epochs] = total_hours(at_epochs(config, epochs), step_times)
        return totals[epochs] <= hours

    if not fits(low):
        return low - 1, totals
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low, totals


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="config/gpu-day.yaml")
    p.add_argument("--step-times", help="a step-times file (default: the config's gpu_costs.step_times)")
    p.add_argument("--hours", type=float, default=24.0, help="the GPU-hours the scale may take")
    p.add_argument("--from-epochs", type=int, help="the fewest epochs to try (default: the config's)")
    opts = p.parse_args(argv)
    config = yaml.safe_load(Path(opts.config).read_text())
    step_times = cost.load_step_times(opts.step_times or config["gpu_costs"]["step_times"])
    now = config["classification"]["epochs"]
    best, totals = most_epochs(config, step_times, opts.hours, opts.from_epochs or now)
    print(f"{config['scale']}: GPU-hours on {step_times['device']} ({step_times['basis']}, commit {step_times['commit']}, "
          f"{step_times['date']}); now {now} epochs: {total_hours(config, step_times):.1f} hours")
    print("| CIFAR epochs | milestones | GPU-hours |")
    print("|---|---|---|")
    for epochs in sorted(totals):
        print(f"| {epochs} | {at_epochs(config, epochs)['classification']['lr_milestones']} | {totals[epochs]:.1f} |")
    print(f"most epochs within {opts.hours:g} hours: {best}" + (" (none fits)" if best < (opts.from_epochs or now) else ""))


if __name__ == "__main__":
    main()
