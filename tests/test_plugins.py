"""Bring your own residual (issue 16, item 5): a variant registered from a file outside src/, and
`extra_rows`, which adds a variant's row to every selected table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from fake_runs import TABLES, config_for, write_metrics

from resrepro import catalog, experiments, models, plugins, residual
from resrepro.analysis.aggregate import aggregate
from resrepro.analysis.parameters import by_row, parameter_counts
from resrepro.catalog import ConfigError
from resrepro.report import render

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "residuals" / "gated_add.py"


@pytest.fixture(scope="module")
def gated_add():
    """The README's example module, loaded as the Snakefile loads it (once per process)."""
    before = os.environ.get(plugins.ENV)
    plugins.use([str(EXAMPLE)])
    yield residual.REGISTRY["gated_add"]
    if before is None:
        os.environ.pop(plugins.ENV, None)
    else:
        os.environ[plugins.ENV] = before


def test_a_variant_from_a_file_outside_the_package_is_declared_and_built(gated_add):
    assert catalog.VARIANTS["gated_add"]["logit"].default == -2.0
    assert os.environ[plugins.ENV] == str(EXAMPLE)
    m = residual.build("gated_add", 4, "seq", {"logit": 0})
    x, f = torch.ones(2, 3, 4), torch.full((2, 3, 4), 2.0)
    torch.testing.assert_close(m(x, f), x + 0.5 * f)  # sigmoid(0) = 1/2
    assert catalog.variant_id("gated_add", {"logit": 0}) == "gated_add-logit0"
    assert plugins.load() == [str(EXAMPLE)]  # a second load imports nothing again
    assert residual.REGISTRY["gated_add"] is gated_add


def test_registering_outside_refuses_a_taken_name_and_bad_params():
    with pytest.raises(ValueError, match="'add' exists already"):
        residual.register_external("add", {})
    with pytest.raises(TypeError, match="catalog.Param"):
        residual.register_external("my_gate", {"k": 1.0})
    assert "my_gate" not in catalog.VARIANTS


def test_a_missing_module_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.py is not a file"):
        plugins.use([str(tmp_path / "nothing.py")])


def test_extra_rows_add_the_variant_on_each_tables_baseline_cell(gated_add):
    config = config_for(["rskip-t1", "sas-t3", "noise-t1", "noise-t3"], seeds=2)
    config["extra_rows"] = [{"variant": "gated_add", "args": {"logit": "0"}}, {"variant": "pre_ln", "label": "Pre-LN here"}]  # as --config gives it
    plan = experiments.make_plan(config)
    extra = {(r["table"], r["label"]): r for r in plan.rows if "spec" in r}
    assert set(extra) == {("rskip-t1", "+ gated_add-logit0"), ("rskip-t1", "Pre-LN here"), ("sas-t3", "+ gated_add-logit0"),
                          ("sas-t3", "Pre-LN here"), ("noise-t1", "+ gated_add-logit0")}  # no Pre-LN in paper 002's nets; noise-t3 measures
    row = extra[("rskip-t1", "+ gated_add-logit0")]
    assert row["baseline"] == "1xSkip" and row["row"] == 10
    assert row["spec"]["depth"] == 110 and row["spec"]["dataset"] == "cifar10" and row["spec"]["new"] is True
    assert row["spec"]["args"] == {"logit": 0}
    base_runs = next(r["runs"] for r in plan.rows if r["table"] == "rskip-t1" and r["label"] == "1xSkip")
    assert [r.replace("/add/", "/gated_add-logit0/") for r in base_runs] == row["runs"]  # the baseline's cell, the variant changed
    translation = extra[("sas-t3", "Pre-LN here")]
    assert translation["baseline"] == "EN-VI Base" and translation["spec"]["size"] == "base"
    with pytest.raises(ConfigError, match=r"extra_rows\[0\]: unknown variant 'nope'"):
        experiments.make_plan({**config, "extra_rows": [{"variant": "nope"}]})
    with pytest.raises(ConfigError, match=r"extra_rows\[0\]: label '1xSkip' is already a row of this table"):
        experiments.make_plan({**config, "extra_rows": [{"variant": "rezero", "label": "1xSkip"}]})


def test_an_extra_row_in_the_depth_study_is_a_line_of_its_own_at_its_baselines_depth(gated_add):
    config = config_for(["beyond-t3"], seeds=2)
    config["extra_rows"] = [{"variant": "gated_add"}]
    (row,) = [r for r in experiments.make_plan(config).rows if "spec" in r]
    assert row["baseline"] == "Post-LN, 6 layers" and row["spec"]["size"] == "base"
    assert (row["spec"]["series"], row["spec"]["layers"]) == ("gated_add", 6)


def test_an_extra_row_is_judged_against_its_baseline_without_a_paper_value(gated_add, tmp_path):
    config = config_for(["rskip-t3"], seeds=3)
    config["extra_rows"] = [{"variant": "gated_add"}]
    plan = experiments.make_plan(config)
    errors = {"add": [6.0, 6.2, 6.4], "gated_add": [5.0, 5.1, 5.2]}
    seconds = {"add": [10.0, 12.0, 14.0], "gated_add": [15.0, 18.0, 21.0]}
    for path, run in plan.runs.items():
        write_metrics(tmp_path, path, errors.get(run.variant_id, [9.0, 9.5, 10.0])[run.seed])
        metrics = json.loads((tmp_path / path / "metrics.json").read_text())
        metrics["wall_time_s"] = seconds.get(run.variant_id, [1.0, 1.0, 1.0])[run.seed]
        (tmp_path / path / "metrics.json").write_text(json.dumps(metrics))
    counts = by_row(parameter_counts(plan.rows, experiments.load_tables(TABLES)))
    rows = aggregate(plan.rows, tmp_path, TABLES, "final", counts)["rows"].set_index("label")
    extra = rows.loc["+ gated_add"]
    assert extra["loop_time_ratio"] == pytest.approx(18.0 / 12.0)  # the cost beside the gain: this run's loops
    assert extra["parameters_at_paper_size"] == models.parameters_of(
        {"arch": "preact_resnet", "depth": 110, "variant": "gated_add", "args": {}, "classes": 10, "in_channels": 3})
    assert render._row_view(extra.rename("+ gated_add").to_frame().T.reset_index(names="label").iloc[0])["loop_time_ratio"] == "1.50x"
    assert rows.loc["0.5x + F", "loop_time_ratio"] != rows.loc["0.5x + F", "loop_time_ratio"]  # the paper's rows: none (NaN)
    assert extra["verdict"] == "better" and bool(extra["new"]) and extra["baseline"] == "x + F"
    assert extra["difference"] == pytest.approx(-1.1) and extra["paper"] != extra["paper"]  # NaN: no paper value
    assert not bool(rows.loc["0.5x + F", "new"]) and rows.loc["0.5x + F", "verdict"] == "supported"  # the paper's rows keep theirs


def test_extra_rows_and_variant_modules_are_in_the_config_schema():
    import yaml

    schema = yaml.safe_load(Path("workflow/schemas/config.schema.yaml").read_text())
    assert schema["properties"]["extra_rows"]["items"]["required"] == ["variant"]
    assert schema["properties"]["variant_modules"]["items"] == {"type": "string"}


def test_the_cli_loads_the_modules_its_environment_names_before_its_command(monkeypatch):
    """A job (or its fork of the preload server) loads the files before running its command; a job
    without the variable loads nothing."""
    import argparse

    from resrepro import cli

    calls = []
    monkeypatch.setattr(plugins, "load", lambda environ=os.environ: calls.append(environ[plugins.ENV]))
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args",
                        lambda self, argv=None: (argparse.Namespace(command="train", run=lambda a: calls.append("ran")), []))
    monkeypatch.delenv(plugins.ENV, raising=False)
    cli.main([])
    assert calls == ["ran"]
    monkeypatch.setenv(plugins.ENV, str(EXAMPLE))
    cli.main([])
    assert calls == ["ran", str(EXAMPLE), "ran"]
