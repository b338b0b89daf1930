"""Paper 002's Appendix E (Figure 13), computed: P(|X| > |Y|) of two zero-mean Gaussians against
the ratio of their deviations, in closed form and simulated, and the figure it becomes without a run."""

import math

import numpy as np
import pandas as pd
import pytest
from fake_runs import FIGURES, config_for

from resrepro import experiments
from resrepro.analysis.aggregate import aggregate_figures
from resrepro.analysis.figure_checks import judge
from resrepro.measure import gaussian, get


@pytest.mark.parametrize("ratio, expected", [(1.0, 0.5), (math.sqrt(3), 2 / 3), (1 / math.sqrt(3), 1 / 3), (0.0, 0.0)])
def test_the_closed_form_by_hand(ratio, expected):
    """(2 / pi) arctan(r): arctan(1) = pi / 4, arctan(sqrt 3) = pi / 3, arctan(1 / sqrt 3) = pi / 6."""
    assert gaussian.closed_form(np.array([ratio]))[0] == pytest.approx(expected)


def test_the_simulation_agrees_with_the_closed_form_and_is_seeded():
    ratio = np.geomspace(0.01, 100, 9)
    simulated = gaussian.simulated(ratio, 200_000, seed=0)
    assert np.abs(simulated - gaussian.closed_form(ratio)).max() < 0.005  # 3 sigma of 200,000 draws: 0.0034
    assert np.array_equal(simulated, gaussian.simulated(ratio, 200_000, seed=0))
    assert np.allclose(gaussian.closed_form(1 / ratio), 1 - gaussian.closed_form(ratio))  # a sigmoid in log r


def test_the_figure_is_computed_without_a_run_and_its_checks_hold():
    figures = experiments.load_figures(FIGURES)
    assert figures["noise-f13"]["task"] is None and "not_reproduced" not in figures["noise-f13"]
    plan = experiments.make_plan({**config_for([], 1, scale="mini"), "figures": ["noise-f13"]})
    assert not plan.runs and [m["curve"] for m in plan.measures] == ["closed form", "simulated"]
    out = aggregate_figures(plan.measures, "/nonexistent", pd.DataFrame(columns=["run", "status"]))
    data = out["figures"]
    assert set(data["label"]) == {"closed form", "simulated"} and (data["run"] == "computed").all()
    assert len(data) == 2 * get("gaussian_inequality").defaults["points"]
    verdicts = [judge(data, check) for check in figures["noise-f13"]["checks"]]
    assert [v.verdict for v in verdicts] == ["supported"] * 5, verdicts
    assert out["figure_cells"]["summary"].iloc[0].endswith("reaches 1/2 at ratio 1")
