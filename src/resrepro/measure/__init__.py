"""Measurements: jobs that read a trained run's checkpoint and write a tidy table.

A figure (config/figures/*.yaml) names a measurement, its settings and the cells it reads; the
workflow runs it once per run of those cells (rule `measure`, one CSV per run and measurement)
on the checkpoints the tables' training jobs already wrote. A new kind of measurement is one
`Measurement` registered here: what it computes from a model and the run's data, how it sums up
what a run shows in a sentence for the report, and which drawing the report uses (`kind`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from ..residual import ConfigError


@dataclass(frozen=True)
class Measurement:
    name: str
    task: str  # whose runs it reads: classification or translation
    kind: str  # the tidy frame's shape, which picks the report's drawing: per_block
    defaults: dict  # its settings and their defaults; a figure may set each
    measure: Callable[..., pd.DataFrame]  # (model, data, settings, device) -> tidy frame
    summarize: Callable[[pd.DataFrame], str]  # the mean over a cell's runs -> what it shows


MEASUREMENTS: dict[str, Measurement] = {}


def register(measurement: Measurement) -> Measurement:
    if measurement.name in MEASUREMENTS:
        raise ValueError(f"measurement {measurement.name!r} is registered twice")
    MEASUREMENTS[measurement.name] = measurement
    return measurement


def get(name: str) -> Measurement:
    if name not in MEASUREMENTS:
        raise ConfigError(f"measurement {name!r} unknown; allowed: {', '.join(MEASUREMENTS)}")
    return MEASUREMENTS[name]


def settings_for(name: str, given: dict | None, where: str) -> dict:
    """The measurement's defaults with a figure's settings over them; an unknown key is refused."""
    m = get(name)
    given = given or {}
    if unknown := set(given) - set(m.defaults):
        raise ConfigError(f"{where}: {name} has no setting {sorted(unknown)[0]!r}; allowed: {sorted(m.defaults)}")
    return {**m.defaults, **given}


from . import gates  # noqa: E402,F401  (registers the measurements)
