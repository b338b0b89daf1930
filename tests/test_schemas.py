"""The papers' data files against their JSON schemas (workflow/schemas/), and the schemas' errors
in the config's words."""

from pathlib import Path

import pytest
import yaml

from resrepro import experiments, schemas
from resrepro.catalog import ConfigError

TABLE = {"paper": "rskip", "caption": "c", "task": "classification", "metric": "test_error",
         "rows": [{"label": "a", "dataset": "cifar10", "depth": 110, "variant": "add", "paper": 6.6}]}


def test_the_schemas_lists_are_the_pipelines():
    """The tasks and metrics a table may name are those the pipeline runs and scores, in the order
    its messages list them."""
    tables = yaml.safe_load(open("workflow/schemas/tables.schema.yaml"))
    assert tables["properties"]["task"]["enum"] == list(experiments.TASKS)
    assert tables["$defs"]["metric"]["enum"] == list(experiments.METRICS)


@pytest.mark.parametrize("change, message", [
    (lambda t: t.pop("caption"), "f.yaml: t1: missing key 'caption'"),
    (lambda t: t.pop("metric"), "f.yaml: t1: missing key 'metric'"),  # a table without a measurement
    (lambda t: t.update(colour="red"), "f.yaml: t1: unknown key 'colour' in a paper's table; allowed: ['baseline', 'caption',"),
    (lambda t: t.update(task="vision"), "f.yaml: t1: task='vision' unknown; allowed: classification, translation, captioning"),
    (lambda t: t["rows"][0].pop("label"), "f.yaml: t1.rows[0]: missing key 'label'"),
    (lambda t: t["rows"][0].update(quantity="risk"), "f.yaml: t1.rows[0]: missing key 'at'"),
    (lambda t: t["rows"][0].update(paper="6.6"), "f.yaml: t1.rows[0].paper: expected a number (or null, with a note); got '6.6'"),
    (lambda t: t.update(paper_runs={"runs": 0, "quote": "q", "where": "w"}), "f.yaml: t1.paper_runs.runs: expected a whole count of at least 1"),
    (lambda t: t.update(rows=[]), "f.yaml: t1.rows: expected minItems 1; got []"),
])
def test_a_tables_schema_error_names_the_file_the_entry_and_the_key(change, message):
    table = yaml.safe_load(yaml.safe_dump(TABLE))
    schemas.check(table, "tables", "f.yaml: t1")
    change(table)
    with pytest.raises(ConfigError) as err:
        schemas.check(table, "tables", "f.yaml: t1")
    assert str(err.value).startswith(message)


def test_the_outermost_error_is_reported_first():
    table = {**TABLE, "plot": "depth", "rows": [{**TABLE["rows"][0], "layers": 0}]}
    with pytest.raises(ConfigError, match="^f.yaml: t1: plot='depth' unknown"):
        schemas.check(table, "tables", "f.yaml: t1")


def test_a_claims_error_names_the_paper_and_the_claim():
    claims = {"sas": [{"claim": "c", "source": "s", "evidence": ["sas-t4"]}, {"claim": "c", "source": "s", "evidence": []}]}
    with pytest.raises(ConfigError, match=r"^claims.yaml: sas\[1\].evidence: expected a list of one or more tables"):
        schemas.check(claims, "claims", "claims.yaml: ")


def test_a_figure_that_is_not_reproduced_has_its_own_keys():
    figure = {"paper": "noise", "caption": "c", "claim": "k", "not_reproduced": "why"}
    schemas.check(figure, "figures", "f.yaml: f1")
    with pytest.raises(ConfigError, match="^f.yaml: f1: unknown key 'cells' in a figure that is not reproduced"):
        schemas.check({**figure, "cells": []}, "figures", "f.yaml: f1")
    with pytest.raises(ConfigError, match="^f.yaml: f1: missing key 'cells'"):
        schemas.check({k: v for k, v in figure.items() if k != "not_reproduced"} | {"measurement": "l2_ratio"}, "figures", "f.yaml: f1")


@pytest.mark.config
def test_every_data_file_of_the_config_holds_to_its_schema():
    for path in sorted(Path("config/tables").glob("*.yaml")):
        for table_id, table in yaml.safe_load(path.read_text()).items():
            schemas.check(table, "tables", f"{path}: {table_id}")
    for path in sorted(Path("config/figures").glob("*.yaml")):
        for figure_id, figure in yaml.safe_load(path.read_text()).items():
            schemas.check(figure, "figures", f"{path}: {figure_id}")
    schemas.check(yaml.safe_load(open("config/claims.yaml")), "claims", "config/claims.yaml: ")
