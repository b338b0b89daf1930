"""Parameter counts at the papers' sizes, for the tables that print them (docs/parameters.md).

A job of its own (`resrepro parameters`, before the aggregate): counting builds each model, on the
meta device (no memory), so the aggregate and the report build none. It reads the plan alone, so it
runs beside training.
"""

from __future__ import annotations

import functools
import json

import pandas as pd

from ..data.subword import VOCAB_SIZES
from ..specs import MISSING, TableRow

# Labels per image dataset (data/cifar.py's CLASSES, which imports torch; scikit-learn's digits: 10; a
# test ties them).
CLASSES = {"cifar10": 10, "cifar100": 100, "digits": 10}
CIFAR_IMAGES = {"in_channels": 3, "image_size": 32}  # what a paper-scale classifier's model spec takes of its data
COLUMNS = ["table", "label", "parameters_at_paper_size"]


def table_row(plan_row: dict, tables: dict) -> TableRow:
    """A plan row's table row: its table's, or its own (an extra row, extra_rows, carries it as "spec")."""
    return TableRow.from_dict(plan_row.get("spec") or tables[plan_row["table"]]["rows"][plan_row["row"]])


def is_new(table: dict, row: TableRow) -> bool:
    """A row with no paper value (beyond the papers, or `new:`): better or worse than its baseline."""
    from ..experiments import BEYOND

    return table["paper"] == BEYOND or bool(row.get("new"))


def shows_parameters(table: dict, row: TableRow) -> bool:
    """Whether rows.csv gives the row's parameters at the paper's size: a translation row (beside
    its vocabulary), a row printing the paper's count, and a new design's (its cost beside its gain)."""
    return (table["task"] == "translation" or row.paper_parameters is not MISSING
            or (is_new(table, row) and table["task"] in ("classification", "translation")))


def parameter_counts(plan_rows: list[dict], tables: dict) -> pd.DataFrame:
    """Each row's parameters at the paper's size, for the rows that show them (shows_parameters)."""
    out = []
    for plan_row in plan_rows:
        table, row = tables[plan_row["table"]], table_row(plan_row, tables)
        if shows_parameters(table, row):
            out.append({"table": plan_row["table"], "label": plan_row["label"],
                        "parameters_at_paper_size": parameters_at_paper_size(row, table["task"], plan_row.get("model_keys"))})
    return pd.DataFrame(out, columns=COLUMNS)


def by_row(counts: pd.DataFrame) -> dict[tuple[str, str], int]:
    """parameter_counts' table as {(table, row label): count}, as the aggregate takes it."""
    return {(r["table"], r["label"]): int(r["parameters_at_paper_size"]) for _, r in counts.iterrows()}


def read_counts(path) -> dict[tuple[str, str], int]:
    """parameters.csv as {(table, row label): count}."""
    return by_row(pd.read_csv(path, keep_default_na=False))


def parameters_at_paper_size(row: TableRow, task: str, model_keys: dict | None = None) -> int:
    """Parameters of the row's model at the paper's size, counted on the meta device (no memory):
    our side of the papers' parameter columns (docs/parameters.md). `model_keys`: what the model
    reads of the row's recipe (experiments.model_keys, e.g. paper 003's init, which adds conv biases)."""
    from .. import models

    arch = models.registry.get(row.get("arch", models.registry.DEFAULT_FOR_TASK[task]))
    counted = {"arch": arch.name, arch.size_key: row.need(arch.size_key), "variant": row.variant, "args": row.get("args") or {},
               **(model_keys or {}), **data_inputs(task, row.dataset)}
    return parameters_of(json.dumps(counted, sort_keys=True))


def data_inputs(task: str, dataset: str) -> dict:
    """What a model spec takes of the paper's dataset: a Transformer the joint vocabulary the
    pipeline builds for it at paper scale (VOCAB_SIZES), a classifier the classes and CIFAR's images."""
    if task == "translation":
        return {"pad_id": 0, "vocab_size": VOCAB_SIZES[dataset]}
    return {"classes": CLASSES[dataset], **CIFAR_IMAGES}


@functools.lru_cache(maxsize=None)
def parameters_of(spec_json: str) -> int:
    """models.parameters_of, once per distinct spec: tables share their baselines' models."""
    from .. import models

    return models.parameters_of(json.loads(spec_json))
