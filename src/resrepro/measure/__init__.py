"""Measurements: jobs that read a trained run's checkpoint and write a tidy table.

A figure (config/figures/*.yaml) names a measurement, its settings and the cells it reads; the
workflow runs it once per run of those cells (rule `measure`, one CSV per run and measurement)
on the checkpoints the tables' training jobs already wrote. A new kind of measurement is its
entry in catalog.MEASUREMENTS (task, kind, settings and its module: declared without torch, for
the workflow's parse) and one `Measurement` registered here from that module, which `get` loads on
first use: what it computes from a model and the run's data, and how it sums up what a run shows
in a sentence for the report.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from typing import Callable

import pandas as pd

from .. import catalog
from ..catalog import settings_for  # noqa: F401  (a figure's settings, checked at parse time)


@dataclass(frozen=True)
class Measurement(catalog.MeasurementSpec):  # name, task, kind (the report's drawing), settings and defaults
    measure: Callable[..., pd.DataFrame] = None  # (model, data, settings, device) -> tidy frame; reads="log": (run_dir, settings)
    summarize: Callable[[pd.DataFrame], str] = None  # the mean over a cell's runs -> what it shows
    reads: str = "model"  # "model": the final checkpoint; "log": the run's train_log.csv (no model, no data);
    # "snapshots": each snapshot the run kept (train/checkpoint.py), measured as a model, rows tagged with the epoch;
    # "first_step_and_end": its weights after the first SGD step (epoch 1 / steps per epoch) and its last
    # snapshot; "nothing": computed (its task None, no run),
    # measure(None, None, settings, None) gives every curve, a column `curve` naming each
    recipe_keys: tuple[str, ...] = ()  # keys of the run's training recipe it reads, passed in with its settings


MEASUREMENTS: dict[str, Measurement] = {}


def register(name: str, measure: Callable[..., pd.DataFrame], summarize: Callable[[pd.DataFrame], str], reads: str = "model",
             recipe_keys: tuple[str, ...] = ()) -> Measurement:
    """The implementation of a measurement declared in catalog.MEASUREMENTS."""
    if name not in catalog.MEASUREMENTS:
        raise ValueError(f"measurement {name!r}: declare it in catalog.MEASUREMENTS first")
    if name in MEASUREMENTS:
        raise ValueError(f"measurement {name!r} is registered twice")
    spec = catalog.MEASUREMENTS[name]
    declared = {f.name: getattr(spec, f.name) for f in fields(spec)}
    MEASUREMENTS[name] = Measurement(**declared, measure=measure, summarize=summarize, reads=reads, recipe_keys=recipe_keys)
    return MEASUREMENTS[name]


def get(name: str) -> Measurement:
    name = catalog.measurement(name).name
    if name not in MEASUREMENTS:
        # imported on first use: a job that reads only a training log (learning_curve) never imports torch
        importlib.import_module(f"{__name__}.{catalog.MEASUREMENTS[name].module}")
    return MEASUREMENTS[name]
