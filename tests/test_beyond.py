"""The tables beyond the papers (issue 16): the depth study's rows and its figure."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from resrepro import experiments
from resrepro.models.transformer import PRESETS
from resrepro.report import figures


@pytest.mark.config
def test_the_depth_study_rows_are_five_variants_at_three_depths_each_against_post_ln_at_its_depth():
    table = experiments.load_tables("config/tables")["beyond-t3"]
    rows = table["rows"]
    assert {(r["series"], r["layers"]) for r in rows} == {(s, n) for s in ("Post-LN", "Pre-LN", "2rSkip+LN", "SAS", "DeepNorm") for n in (6, 12, 24)}
    for r in rows:  # a row's layers are its paper size's, a side
        assert PRESETS[r["size"]]["encoder_layers"] == PRESETS[r["size"]]["decoder_layers"] == r["layers"]
        assert r.get("baseline", f"Post-LN, {r['layers']} layers") == f"Post-LN, {r['layers']} layers"
    mini = yaml.safe_load(open("config/mini.yaml"))["translation"]["sizes"]
    assert [PRESETS[mini[size]]["encoder_layers"] for size in ("base", "deep12", "deep24")] == [3, 6, 12]


@pytest.mark.parametrize("row, message", [
    ({"series": "A"}, "got series=.A., layers=None"),
    ({"layers": 6}, "plot: layers needs a series"),
    ({"series": "A", "layers": 0}, r"rows\[0\].layers: expected a whole number > 0"),
])
def test_a_plotted_table_needs_each_rows_series_and_layers(tmp_path, row, message):
    table = {"paper": "beyond", "caption": "c", "source": "s", "task": "translation", "metric": "bleu", "plot": "layers",
             "rows": [{"label": "a", "dataset": "iwslt15_en_vi", "size": "base", "variant": "add", **row}]}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"bad-t1": table}))
    with pytest.raises(experiments.ConfigError, match=message):
        experiments.load_tables(tmp_path)
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({"bad-t1": {**table, "plot": "depth"}}))
    with pytest.raises(experiments.ConfigError, match="bad-t1: plot='depth' unknown; allowed: layers"):
        experiments.load_tables(tmp_path)


def test_the_depth_figure_draws_each_series_and_marks_a_depth_that_diverged(monkeypatch):
    rows = pd.DataFrame({"series": ["A", "A", "B", "B"], "layers": [6, 12, 6, 12], "metric": ["bleu"] * 4,
                         "mean": [30.0, 31.0, 29.0, float("nan")], "std": [0.5, 0.4, 0.3, float("nan")],
                         "n": [2, 2, 2, 0], "n_diverged": [0, 0, 0, 2]})
    drawn = {}
    real = figures.to_png

    def keep(fig):
        ax = fig.axes[0]
        drawn["lines"] = [(tuple(line.get_xdata()), tuple(line.get_ydata())) for line in ax.lines if len(line.get_xdata()) > 1]
        drawn["crosses"] = [tuple(map(tuple, c.get_offsets())) for c in ax.collections if c.get_offsets().shape[0] and "diverged" in c.get_label()]
        drawn["labels"] = ax.get_legend_handles_labels()[1]
        return real(fig)

    monkeypatch.setattr(figures, "to_png", keep)
    assert figures.metric_against_layers(rows, "beyond-t3").startswith(b"\x89PNG")
    assert ((6, 12), (30.0, 31.0)) in drawn["lines"]
    assert drawn["crosses"] == [((12.0, 0.0),)] and "B: diverged" in drawn["labels"]
    assert figures.metric_against_layers(rows.iloc[0:0], "beyond-t3") is None


def test_the_config_schema_allows_every_transformer_preset_as_a_size():
    """A scale maps the tables' sizes to presets; the schema's list is the presets' (a new preset
    left out of it fails every scale that names it, as the depth study's did)."""
    schema = yaml.safe_load(open("workflow/schemas/config.schema.yaml"))
    assert set(schema["properties"]["translation"]["properties"]["sizes"]["additionalProperties"]["enum"]) == set(PRESETS)
