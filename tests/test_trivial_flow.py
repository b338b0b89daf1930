"""Paper 002's SM D.4.1 (Figure 11 (d), (e)), computed: the fraction of dominant gradient flow in
the trivial case (1 x 1 kernels, 1-D activations), simulated, and the figures it becomes without a run."""

import numpy as np
import pandas as pd
import pytest
import torch
from fake_runs import FIGURES, config_for

from resrepro import experiments
from resrepro.analysis.aggregate import aggregate_figures
from resrepro.analysis.figure_checks import judge
from resrepro.measure import dominant_flow, get, trivial_flow


def one_draw(*layers):
    """weights (layers, 1, n, n) and masks (layers, 1, n) of one net, from (W, mask) pairs listed
    from the layer just above the measured one to the last."""
    return np.array([[w] for w, _ in layers], dtype=float), np.array([[m] for _, m in layers], dtype=float)


def test_one_2x2_layer_by_hand():
    """M = W^T D diag(g): M[i, j] = W[j, i] d_j g_j. W = [[1, 0.2], [0.5, 1]], g = (1, -3):
    entry 0 gets 1 along its path and 0.5 * 3 = 1.5 from final entry 1 (ratio 2/3, not dominant);
    entry 1 gets 3 along its path and 0.2 from final entry 0 (ratio 15, dominant)."""
    w = [[1.0, 0.2], [0.5, 1.0]]
    weights, masks = one_draw((w, [1, 1]))
    flow = trivial_flow.flow_matrix(weights, masks, np.array([[1.0, -3.0]]))
    assert np.allclose(flow[0], [[1.0, -1.5], [0.2, -3.0]])
    assert trivial_flow.dominant_fraction(flow) == 0.5
    # final entry 1's ReLU closed: entry 0 is reached along its path alone (x / 0: dominant),
    # entry 1 only from elsewhere (0 / 0.2: not)
    weights, masks = one_draw((w, [1, 0]))
    assert trivial_flow.dominant_fraction(trivial_flow.flow_matrix(weights, masks, np.array([[1.0, -3.0]]))) == 0.5
    weights, masks = one_draw((w, [0, 0]))  # nothing passes: 0 / 0 counts 0
    assert trivial_flow.dominant_fraction(trivial_flow.flow_matrix(weights, masks, np.array([[1.0, -3.0]]))) == 0.0


def test_two_layers_by_hand_multiply_in_the_order_of_back_propagation():
    """M = W_1^T D_1 W_2^T D_2 diag(g), W_1 = [[1, 1], [0, 1]] (above the measured layer),
    W_2 = diag(1, 2) (the last), g = (1, 1): M = [[1, 0], [1, 2]], both entries dominant (inf and
    2). The other order, W_2^T W_1^T = [[1, 0], [2, 2]], would leave entry 1 at ratio 1: not."""
    w1, w2 = [[1.0, 1.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 2.0]]
    weights, masks = one_draw((w1, [1, 1]), (w2, [1, 1]))
    flow = trivial_flow.flow_matrix(weights, masks, np.ones((1, 2)))
    assert np.allclose(flow[0], [[1.0, 0.0], [1.0, 2.0]]) and trivial_flow.dominant_fraction(flow) == 1.0
    weights, masks = one_draw((w1, [0, 1]), (w2, [1, 1]))  # D_1 closes entry 0: M = [[0, 0], [0, 2]]
    flow = trivial_flow.flow_matrix(weights, masks, np.ones((1, 2)))
    assert np.allclose(flow[0], [[0.0, 0.0], [0.0, 2.0]]) and trivial_flow.dominant_fraction(flow) == 0.5


@pytest.mark.parametrize("residual", [True, False])
def test_when_no_relu_passes_no_gradient_does_and_no_entry_is_dominant(residual):
    """The text's first extreme case: p = 0, "all the [D] are zero matrices. Then no gradients can be
    back-propagated and [M] is zero matrix"."""
    weights, masks, gradient = trivial_flow.draw_net(np.random.default_rng(0), 8, 3, 0.0, 1.0, 50, residual)
    assert not masks.any() and not trivial_flow.flow_matrix(weights, masks, gradient).any()
    assert trivial_flow.simulated_fraction(np.random.default_rng(0), 8, 3, 0.0, 1.0, 50, residual) == 0.0


def test_a_residual_net_without_noise_whose_relus_all_pass_has_every_entry_dominant():
    """The other extreme, p = 1, with W = I exactly: M = diag(G), every entry reached along its own
    path alone."""
    weights, masks, gradient = trivial_flow.draw_net(np.random.default_rng(1), 16, 3, 1.0, 1.0, 20, True, noise_std=0.0)
    assert np.array_equal(trivial_flow.flow_matrix(weights, masks, gradient), np.stack([np.diag(g) for g in gradient]))
    assert trivial_flow.simulated_fraction(np.random.default_rng(1), 16, 3, 1.0, 1.0, 20, True, noise_std=0.0) == 1.0
    # with the chosen noise (HMWI, 1 / n) it is no longer every entry
    assert trivial_flow.simulated_fraction(np.random.default_rng(1), 16, 3, 1.0, 1.0, 20, True) < 1.0


def test_the_fraction_is_the_real_measurements_on_the_trivial_case():
    """measure/dominant_flow.py's rule, one position per sub-activation: the same number."""
    weights, masks, gradient = trivial_flow.draw_net(np.random.default_rng(2), 6, 2, 0.5, 1.0, 40, True, noise_std=0.5)
    flow = trivial_flow.flow_matrix(weights, masks, gradient)
    own = np.diagonal(flow, axis1=1, axis2=2)
    share = dominant_flow.dominant_share(torch.tensor(np.abs(own))[..., None], torch.tensor(np.abs(flow.sum(axis=2) - own))[..., None])
    fraction = trivial_flow.dominant_fraction(trivial_flow.flow_matrix(weights, masks, gradient))
    assert 0 < fraction < 1 and fraction == pytest.approx(float(share))


def test_normal_sources_give_equation_14s_probability_as_the_text_says():
    """"If the distribution is normal, [the fraction] should be only affected by the dimension of
    [n] by Equation 14": with every source's gradient an independent N(0, 1), an entry is dominant
    when |X| > |Y|, Y the sum of the n - 1 others, N(0, n - 1), which Equation 14 (noise-f13's
    closed form) gives as (2 / pi) arctan(1 / sqrt(n - 1)): 0.161 at n = 16. Summing the others'
    magnitudes instead would make almost no entry dominant."""
    for n in (4, 16):
        flow = np.random.default_rng(4).standard_normal((20000, n, n))
        assert trivial_flow.dominant_fraction(flow) == pytest.approx(2 / np.pi * np.arctan(1 / np.sqrt(n - 1)), abs=0.005)


@pytest.mark.parametrize("residual", [True, False])
def test_the_scale_of_the_final_gradients_cancels_and_so_does_the_plain_weights_std(residual):
    """Scaling G (or every plain W) scales every M_j alike: the same draws give the same fraction."""
    at = lambda s, std=None: trivial_flow.simulated_fraction(np.random.default_rng(3), 16, 2, 0.5, s, 200, residual, std)  # noqa: E731
    assert at(0.01) == at(1.0) == at(100.0) > 0
    if not residual:
        assert at(1.0, 0.01) == at(1.0, 10.0) == at(1.0)


@pytest.mark.parametrize("name", ["trivial_flow_scale", "trivial_flow_p"])
def test_fractions_lie_in_0_1_and_the_same_seed_gives_the_same_curves(name):
    measurement = get(name)
    small = {**measurement.defaults, "draws": 50, "points": 5, "n": 8}
    frame = measurement.measure(None, None, small, None)
    fractions = frame[frame["quantity"] == trivial_flow.FRACTION]
    assert set(fractions["curve"]) == set(trivial_flow.CURVES) and len(fractions) == 2 * 5
    assert fractions["value"].between(0, 1).all() and fractions["value"].gt(0).any()
    assert frame.equals(measurement.measure(None, None, small, None))
    assert not frame.equals(measurement.measure(None, None, {**small, "seed": 1}, None))


@pytest.mark.parametrize("figure_id, measurement, column", [("noise-f11d", "trivial_flow_scale", "gradient_std"),
                                                            ("noise-f11e", "trivial_flow_p", "p")])
def test_the_figures_are_computed_without_a_run_and_their_checks_hold(figure_id, measurement, column):
    figures = experiments.load_figures(FIGURES)
    figure = figures[figure_id]
    assert figure["task"] is None and figure["measurement"] == measurement and "not_reproduced" not in figure
    plan = experiments.make_plan({**config_for([], 1, scale="mini"), "figures": [figure_id]})
    assert not plan.runs and [m["curve"] for m in plan.measures] == ["residual, simulated", "plain, simulated"]
    out = aggregate_figures(plan.measures, "/nonexistent", pd.DataFrame(columns=["run", "status"]))
    data = out["figures"]
    assert set(data["label"]) == {"residual, simulated", "plain, simulated"} and (data["run"] == "computed").all()
    points = get(measurement).defaults["points"]
    assert data.loc[data["quantity"] == trivial_flow.FRACTION, column].nunique() == points
    verdicts = [judge(data, check) for check in figure["checks"]]
    assert [v.verdict for v in verdicts] == ["supported"] * len(figure["checks"]) and len(verdicts) == 3, verdicts
    assert all(s.startswith("fraction ") for s in out["figure_cells"]["summary"])
    # panels (a)-(c) are never silently dropped: the report says why they are not drawn
    assert "(a)-(c)" in figures["noise-f11"]["not_reproduced"] and "equations that our copy of the paper lost" in figures["noise-f11"]["not_reproduced"]
