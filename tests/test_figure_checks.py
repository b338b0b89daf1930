"""Figure verdicts (analysis/figure_checks.py) on hand-made figures.csv rows whose answer is known."""

import os
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from resrepro.analysis.figure_checks import TESTS, Undecidable, judge, select
from resrepro.catalog import ConfigError
from resrepro.experiments import load_figures


def rows(values: dict, seed: int = 0, **columns) -> pd.DataFrame:
    """One curve per cell label: {label: [value at block 1, 2, ...]}, with constant extra columns."""
    return pd.DataFrame([{"figure": "f", "label": label, "run": f"{label}/seed{seed}", "seed": seed, "block": i + 1, "value": v, **columns}
                         for label, curve in values.items() for i, v in enumerate(curve)])


def holds(test: str, frame, **args) -> bool:
    return TESTS[test].function(frame.drop(columns="seed"), **args)[0]


def test_below_and_above_are_strict_and_count_a_share():
    frame = rows({"a": [-1.0, -0.5, 0.0, -2.0]})
    assert not holds("below", frame, value=0)  # 0 is not below 0
    assert holds("below", frame, value=0.01)
    assert holds("below", frame, value=0, share=0.75) and not holds("below", frame, value=0, share=0.76)
    assert holds("above", frame, value=-2.5) and not holds("above", frame, value=-2)
    assert holds("above", frame, value=-1.5, share=0.75) and not holds("above", frame, value=-1.5)
    assert TESTS["below"].function(frame, value=0)[1] == "75% below 0; largest 0 (a)"
    assert TESTS["above"].function(frame, value=-1)[1] == "50% above -1; smallest -2 (a)"


def test_rises_and_falls_compare_each_curves_ends_and_all_curves_must_agree():
    frame = rows({"up": [1.0, 5.0, 2.0], "flat": [3.0, 0.0, 3.0]})
    assert holds("rises", rows({"up": [1.0, 5.0, 2.0]}), along="block")  # last 2 > first 1, whatever lies between
    assert not holds("rises", frame, along="block")  # "flat" ends where it starts
    assert not holds("falls", frame, along="block")
    assert holds("falls", rows({"down": [3.0, 9.0, 2.5], "down2": [1.0, 0.0]}), along="block")
    # the evidence names the curve that rose (fell) least, or the one that did not where the check fails
    assert TESTS["rises"].function(frame, along="block")[1] == "does not rise: 3 to 3 along block (flat)"
    assert TESTS["rises"].function(rows({"up": [1.0, 5.0, 2.0]}), along="block")[1] == "least rise: 1 to 2 along block (up)"
    down = rows({"down": [3.0, 9.0, 2.5], "down2": [1.0, 0.0]})
    assert TESTS["falls"].function(down, along="block")[1] == "least fall: 3 to 2.5 along block (down)"
    assert TESTS["falls"].function(frame, along="block")[1] == "does not fall: 1 to 2 along block (up)"
    shuffled = rows({"up": [1.0, 5.0, 2.0]}).iloc[::-1]  # order of the rows does not matter: sorted along the axis
    assert holds("rises", shuffled, along="block")


def test_curves_are_told_apart_by_every_column_in_use():
    train = rows({"a": [1.0, 2.0]}, split="train")
    test = rows({"a": [2.0, 1.0]}, split="test")
    both = pd.concat([train, test])
    assert not holds("rises", both, along="block")  # the held-out curve falls
    assert TESTS["rises"].function(both, along="block")[1] == "does not rise: 2 to 1 along block (a, split test)"


def test_first_largest_and_smallest_against_the_mean_of_the_rest():
    assert holds("first_largest", rows({"a": [2.0, 1.0, 2.9]}), along="block")  # 2 > mean(1, 2.9) = 1.95
    assert not holds("first_largest", rows({"a": [2.0, 1.0, 3.1]}), along="block")  # 2 < 2.05
    assert not holds("first_largest", rows({"a": [2.0, 2.0, 2.0]}), along="block")
    assert holds("first_smallest", rows({"a": [1.0, 2.0, 0.1]}), along="block")  # 1 < 1.05
    assert not holds("first_smallest", rows({"a": [1.0, 2.0, 0.1], "b": [5.0, 1.0, 1.0]}), along="block")
    evidence = TESTS["first_largest"].function(rows({"a": [2.0, 1.0, 3.0], "b": [9.0, 1.0]}), along="block")[1]
    assert evidence == "first block 2 against 2 for the rest (a)"


def test_peak_between_finds_each_curves_mode_and_bounds_are_inclusive():
    frame = rows({"a": [1.0, 9.0, 3.0], "b": [0.0, 2.0, 7.0]})  # modes at block 2 and block 3
    assert holds("peak_between", frame, along="block", low=2, high=3)
    assert not holds("peak_between", frame, along="block", low=2.5, high=3)  # a's mode, 2, is below
    assert not holds("peak_between", frame, along="block", low=2, high=2.9)  # b's mode, 3, is above
    assert TESTS["peak_between"].function(frame, along="block", low=2, high=2.9)[1] == "block 2 (a); block 3 (b): not all in [2, 2.9]"


def test_ordered_needs_each_cell_above_the_next():
    frame = rows({"big": [3.0, 5.0], "mid": [2.0, 4.0], "small": [1.0, 0.0]})  # means 4, 3, 0.5
    assert holds("ordered", frame, cells=["big", "mid", "small"])
    assert not holds("ordered", frame, cells=["big", "small", "mid"])
    assert not holds("ordered", frame, cells=["mid", "big"])
    assert not holds("ordered", rows({"a": [1.0], "b": [1.0]}), cells=["a", "b"])  # a tie is no order
    assert TESTS["ordered"].function(frame, cells=["big", "small"])[1] == "big 4 > small 0.5"
    assert TESTS["ordered"].function(frame, cells=["small", "big"])[1] == "small 0.5, big 4"


def test_select_by_value_list_extreme_threshold_cells_and_mean_over():
    frame = pd.concat([rows({"a": [1.0, 2.0, 3.0], "b": [4.0, 5.0, 6.0]}, epoch=e, quantity=q)
                       for e in (0, 1, 2) for q in ("x", "y")])
    assert set(select(frame, {"claim": "c", "select": {"quantity": "x"}})["quantity"]) == {"x"}
    assert set(select(frame, {"claim": "c", "select": {"epoch": [0, 2]}})["epoch"]) == {0, 2}
    assert set(select(frame, {"claim": "c", "select": {"epoch": "max"}})["epoch"]) == {2}
    assert set(select(frame, {"claim": "c", "select": {"epoch": "min"}})["epoch"]) == {0}
    assert set(select(frame, {"claim": "c", "select": {"epoch": {"at_least": 1}}})["epoch"]) == {1, 2}
    assert set(select(frame, {"claim": "c", "cells": ["b"]})["label"]) == {"b"}
    means = select(frame, {"claim": "c", "select": {"quantity": "x", "epoch": 1}, "mean_over": ["block"]})
    assert "block" not in means and sorted(means["value"]) == [2.0, 5.0]
    with pytest.raises(ValueError, match="select names 'stage', not a column"):
        select(frame, {"claim": "c", "select": {"stage": 1}})


def test_judge_counts_the_seeds_where_the_test_holds():
    check = {"claim": "negative everywhere", "test": "below", "value": 0}
    s0, s1, s2 = rows({"a": [-1.0, -2.0]}, 0), rows({"a": [-1.0, -3.0]}, 1), rows({"a": [0.5, -3.0]}, 2)
    v = judge(pd.concat([s0, s1]), check)
    assert (v.verdict, v.seeds_holding, v.seeds, v.claim) == ("supported", 2, 2, "negative everywhere")
    assert v.evidence == "100% below 0; largest -1 (a)"  # on the mean over seeds: -1 and -2.5
    v = judge(pd.concat([s0, s1, s2]), check)
    assert (v.verdict, v.seeds_holding, v.seeds) == ("inconclusive", 2, 3)
    assert v.evidence == "100% below 0; largest -0.5 (a)"  # the mean of -1, -1 and 0.5
    v = judge(s2, check)
    assert (v.verdict, v.seeds_holding, v.seeds) == ("contradicted", 0, 1)
    assert judge(s0, check).verdict == "supported"  # the paper draws one run: one seed can show a shape


def test_a_seed_that_misses_a_cell_the_check_reads_is_not_counted():
    check = {"claim": "a above b", "test": "ordered", "cells": ["a", "b"]}
    both = pd.concat([rows({"a": [2.0], "b": [1.0]}, 0), rows({"a": [0.0]}, 1)])  # seed 1 of b: not measured
    v = judge(both, check)
    assert (v.verdict, v.seeds_holding, v.seeds, v.evidence) == ("supported", 1, 1, "a 2 > b 1")
    v = judge(rows({"a": [0.0]}, 1), check)
    assert (v.verdict, v.seeds, v.evidence) == ("no result", 0, "no seed measured every cell")
    v = judge(rows({"a": [0.0]}, 1), {**check, "select": {"block": 7}})
    assert (v.verdict, v.evidence) == ("no result", "no measured run has these rows")


FIGURE = {"paper": "iter", "caption": "c", "measurement": "l2_ratio", "claim": "c",
          "cells": [{"label": "net", "dataset": "cifar10", "depth": 20, "variant": "add"}]}


@pytest.mark.parametrize("checks, message", [
    ({"claim": "c", "test": "below"}, "checks: expected a list of checks"),
    ([{"claim": "c", "source": "s", "test": "lower", "value": 0}], "checks[0]: test='lower' unknown; allowed: below, above"),
    ([{"claim": "c", "source": "s", "test": "below"}], "checks[0]: missing key 'value' (test below)"),
    ([{"source": "s", "test": "below", "value": 0}], "checks[0]: missing key 'claim' (test below)"),
    ([{"claim": "c", "test": "below", "value": 0}], "checks[0]: missing key 'source' (test below)"),
    ([{"claim": "c", "source": "s", "test": "rises", "along": "block", "value": 0}], "checks[0]: unknown key 'value'; allowed for test rises"),
    ([{"claim": "c", "source": "s", "test": "ordered", "cells": ["net", "other net"]}], "checks[0].cells: 'other net' is not a cell of this figure"),
])
def test_a_bad_check_names_the_figure_and_the_check(tmp_path, checks, message):
    (tmp_path / "f.yaml").write_text(yaml.safe_dump({"iter-fx": {**FIGURE, "checks": checks}}))
    with pytest.raises(ConfigError) as err:
        load_figures([tmp_path / "f.yaml"])
    assert message in str(err.value) and "iter-fx" in str(err.value)


@pytest.mark.config
def test_every_figure_of_the_papers_checks_a_part_of_its_claim():
    """So that each figure has a verdict in its section and can be a claim's evidence in the summary."""
    figures = load_figures("config/figures")
    assert [f for f, entry in figures.items() if not entry.get("checks") and not entry.get("not_reproduced")] == []


def test_one_failing_curve_fails_the_test_wherever_it_comes():
    first_fails = rows({"flat": [3.0, 3.0], "up": [1.0, 2.0]})
    assert not holds("rises", first_fails, along="block")
    assert not holds("first_largest", rows({"low": [0.0, 1.0], "high": [5.0, 1.0]}), along="block")


def test_the_evidence_names_the_curve_with_the_smallest_margin():
    # margins 1 (a: 0 -> 1) and 0.5 (b: 10 -> 10.5): b is the worst although its values are larger
    assert TESTS["rises"].function(rows({"a": [0.0, 1.0], "b": [10.0, 10.5]}), along="block")[1] == "least rise: 10 to 10.5 along block (b)"
    assert TESTS["rises"].function(rows({"b": [10.0, 10.5], "a": [0.0, 1.0]}), along="block")[1] == "least rise: 10 to 10.5 along block (b)"
    # a tie: the first such curve
    assert TESTS["rises"].function(rows({"a": [0.0, 1.0], "b": [5.0, 6.0]}), along="block")[1] == "least rise: 0 to 1 along block (a)"


def test_a_curve_with_an_empty_column_counts_and_is_named_by_its_columns():
    """figures.csv: a column one measurement writes is empty in another's rows; such a curve is a
    curve all the same. The evidence names columns: text as is, numbers short, the quantity alone."""
    grouped = rows({"net": [1.0, 2.0]}, quantity="accuracy (%)", group="borderline", epoch=6.0)
    ungrouped = rows({"net": [2.0, 1.0]}, quantity="loss", epoch=6.0)  # no group: NaN in the concatenation
    both = pd.concat([grouped, ungrouped], ignore_index=True)
    assert not holds("rises", both, along="block")
    assert TESTS["rises"].function(both, along="block")[1] == "does not rise: 2 to 1 along block (net, loss, group nan, epoch 6)"
    assert TESTS["rises"].function(grouped, along="block")[1] == "least rise: 1 to 2 along block (net, accuracy (%), group borderline, epoch 6)"


def test_mean_over_averages_across_the_columns_named_whatever_else_differs():
    train = rows({"a": [1.0, 3.0]}, split="train", examples=1297)
    test = rows({"a": [3.0, 5.0]}, split="test", examples=500)
    means = select(pd.concat([train, test]), {"claim": "c", "mean_over": ["split"]})
    assert sorted(means["value"]) == [2.0, 4.0] and len(means) == 2


def test_no_rows_at_all_is_no_result_whatever_the_check_selects():
    empty = pd.DataFrame(columns=["figure", "cell", "label", "run", "seed", "value"])
    v = judge(empty, {"claim": "negative", "test": "below", "value": 0, "select": {"quantity": "q"}})
    assert (v.claim, v.verdict, v.seeds_holding, v.seeds, v.evidence) == ("negative", "no result", 0, 0, "no measured run has these rows")


def test_rows_with_an_empty_column_stay_in_the_means():
    """The mean over seeds (the evidence) and mean_over keep rows whose other columns are empty."""
    grouped = pd.concat([rows({"a": [-1.0, -2.0]}, s, group="borderline") for s in (0, 1)])
    ungrouped = pd.concat([rows({"b": [-0.5, 4.0]}, s) for s in (0, 1)])
    both = pd.concat([grouped, ungrouped], ignore_index=True)
    v = judge(both, {"claim": "c", "test": "below", "value": 0})
    assert (v.verdict, v.evidence) == ("contradicted", "75% below 0; largest 4 (b)")
    means = select(both, {"claim": "c", "mean_over": ["block", "seed", "run"]})
    assert sorted(means["value"]) == [-1.5, 1.75]


def test_ordered_at_each_counts_the_points_where_the_first_cell_is_above():
    frame = rows({"red": [3.0, 2.0, 1.0, 5.0], "blue": [1.0, 2.0, 0.5, 4.0]})  # red above at blocks 1, 3, 4; a tie at 2
    assert not holds("ordered_at_each", frame, cells=["red", "blue"], along="block")
    assert holds("ordered_at_each", frame, cells=["red", "blue"], along="block", share=0.75)
    assert not holds("ordered_at_each", frame, cells=["red", "blue"], along="block", share=0.76)
    assert not holds("ordered_at_each", frame, cells=["blue", "red"], along="block", share=0.25)
    assert TESTS["ordered_at_each"].function(frame, cells=["red", "blue"], along="block")[1] == \
        "red above blue at 3 of 4 blocks; least margin at block 2: 2 against 2"
    # only the points both cells have are compared
    assert holds("ordered_at_each", rows({"red": [3.0, 2.0], "blue": [1.0]}), cells=["red", "blue"], along="block")
    with pytest.raises(Undecidable, match="share no point"):
        holds("ordered_at_each", rows({"red": [3.0]}), cells=["red", "blue"], along="block")


def test_select_at_most_and_between():
    frame = pd.concat([rows({"a": [1.0]}, epoch=e) for e in range(5)])
    assert set(select(frame, {"claim": "c", "select": {"epoch": {"at_most": 2}}})["epoch"]) == {0, 1, 2}
    assert set(select(frame, {"claim": "c", "select": {"epoch": {"at_least": 1, "at_most": 3}}})["epoch"]) == {1, 2, 3}


DIFFERENCE_FIGURE = {**FIGURE, "cells": [{"label": "net", "dataset": "cifar10", "depth": 20, "variant": "add"},
                                         {"label": "plain", "dataset": "cifar10", "depth": 20, "variant": "plain"}]}


@pytest.mark.parametrize("differences, message", [
    ({"label": "gap", "of": "net", "minus": "plain"}, "differences: expected a non-empty list"),
    ([], "differences: expected a non-empty list"),
    ([{"label": "gap", "of": "net"}], "differences[0]: missing key 'minus'"),
    ([{"label": "gap", "of": "net", "minus": "plain", "sign": -1}], "differences[0]: unknown key 'sign' in a difference; allowed: ['abs', 'label', 'minus', 'of']"),
    ([{"label": "gap", "of": "net", "minus": "resnet"}], "differences[0]: 'resnet' is not a cell of this figure"),
    ([{"label": "net", "of": "net", "minus": "plain"}], "differences[0].label: 'net' names a cell or another difference"),
    ([{"label": "gap", "of": "net", "minus": "plain"}, {"label": "gap", "of": "plain", "minus": "net"}], "differences[1].label: 'gap'"),
])
def test_a_bad_difference_names_the_figure(tmp_path, differences, message):
    (tmp_path / "f.yaml").write_text(yaml.safe_dump({"iter-fx": {**DIFFERENCE_FIGURE, "differences": differences}}))
    with pytest.raises(ConfigError) as err:
        load_figures([tmp_path / "f.yaml"])
    assert message in str(err.value) and "iter-fx" in str(err.value)


def test_a_check_may_read_a_difference_by_its_label(tmp_path):
    check = {"claim": "c", "source": "s", "test": "below", "value": 0, "cells": ["gap"]}
    entry = {**DIFFERENCE_FIGURE, "differences": [{"label": "gap", "of": "net", "minus": "plain", "abs": True}], "checks": [check]}
    (tmp_path / "f.yaml").write_text(yaml.safe_dump({"iter-fx": entry}))
    assert load_figures([tmp_path / "f.yaml"])["iter-fx"]["differences"][0]["abs"] is True


def test_a_figure_that_is_not_reproduced_needs_its_reason_and_nothing_to_measure(tmp_path):
    entry = {"paper": "noise", "caption": "c", "claim": "c", "not_reproduced": "its equations are lost"}
    (tmp_path / "f.yaml").write_text(yaml.safe_dump({"noise-fx": entry}))
    assert load_figures([tmp_path / "f.yaml"])["noise-fx"]["cells"] == []
    for bad, message in (({**entry, "measurement": "l2_ratio"}, "unknown key 'measurement' in a figure that is not reproduced"),
                         ({k: v for k, v in entry.items() if k != "claim"}, "missing key 'claim'")):
        (tmp_path / "f.yaml").write_text(yaml.safe_dump({"noise-fx": bad}))
        with pytest.raises(ConfigError, match=message):
            load_figures([tmp_path / "f.yaml"])


def test_an_ordered_check_of_two_cells_states_the_difference_its_seeds_resolve():
    """Per seed, a - b: 1, 2 and 3 (sd 1, n 3): (t(0.975, 2) + t(0.8, 2)) / sqrt(3) = (4.3027 + 1.0607) / 1.7321."""
    seeds = pd.concat([rows({"a": [b + d, b + d], "b": [b, b]}, s) for s, (b, d) in enumerate([(1.0, 1.0), (3.0, 2.0), (2.0, 3.0)])])
    v = judge(seeds, {"claim": "a above b", "test": "ordered", "cells": ["a", "b"]})
    assert v.verdict == "supported" and v.resolvable == pytest.approx((4.302653 + 1.060660) / 3 ** 0.5, rel=1e-5)
    assert judge(seeds[seeds["seed"] == 0], {"claim": "c", "test": "ordered", "cells": ["a", "b"]}).resolvable is None  # one seed
    assert judge(seeds, {"claim": "c", "test": "below", "value": 9}).resolvable is None  # not a comparison of two cells
    assert judge(seeds, {"claim": "c", "test": "below", "value": 9, "cells": ["a", "b"]}).resolvable is None  # nor is this


def test_falls_more_compares_the_first_to_last_ratio_of_two_cells():
    """sas-f4: SAS's gradient norms fall towards the last block shown (3 to 1.5: 2x), x + F's
    stay about level (2 to 1.6: 1.25x); another column (the split) is averaged within each cell."""
    sas = rows({"SAS": [3.0, 2.0, 1.5]})
    plain = pd.concat([rows({"x + F": [2.2, 2.0, 1.7]}, split="train"), rows({"x + F": [1.8, 2.0, 1.5]}, split="test")])
    both = pd.concat([sas, plain])
    assert holds("falls_more", both, cells=["SAS", "x + F"], along="block")
    assert not holds("falls_more", both, cells=["x + F", "SAS"], along="block")
    assert TESTS["falls_more"].function(both, cells=["SAS", "x + F"], along="block")[1] == "first block / last: SAS 2, x + F 1.25"
    level = rows({"SAS": [2.0, 2.0]})
    assert not holds("falls_more", pd.concat([level, rows({"x + F": [2.0, 2.0]})]), cells=["SAS", "x + F"], along="block")  # equal: no
    one_point = rows({"SAS": [2.0]})
    with pytest.raises(Undecidable, match="SAS has 1 point along block"):  # no curve to fall: neither holds nor fails
        holds("falls_more", pd.concat([one_point, plain]), cells=["SAS", "x + F"], along="block")


def test_spread_ordered_compares_the_largest_over_the_smallest_of_two_cells():
    """rskip-f3: a 2x skip doubles the gradient at each block down (1, 2, 4: 4x), 1xSkip's is
    about level (1, 1.2, 1.5: 1.5x); a curve of one point or a zero has no spread."""
    both = pd.concat([rows({"2xSkip": [4.0, 2.0, 1.0]}), rows({"1xSkip": [1.0, 1.2, 1.5]})])
    assert holds("spread_ordered", both, cells=["2xSkip", "1xSkip"], along="block")
    assert not holds("spread_ordered", both, cells=["1xSkip", "2xSkip"], along="block")
    assert TESTS["spread_ordered"].function(both, cells=["2xSkip", "1xSkip"], along="block")[1] == \
        "largest / smallest across the blocks: 2xSkip 4, 1xSkip 1.5"
    with_zero = pd.concat([rows({"2xSkip": [4.0, 0.0]}), rows({"1xSkip": [1.0, 1.2]})])
    with pytest.raises(Undecidable, match="2xSkip has a value of 0 along block"):
        holds("spread_ordered", with_zero, cells=["2xSkip", "1xSkip"], along="block")
    with pytest.raises(Undecidable, match="2xSkip has 1 point along block"):
        holds("spread_ordered", pd.concat([rows({"2xSkip": [4.0]}), rows({"1xSkip": [1.0, 1.2]})]), cells=["2xSkip", "1xSkip"], along="block")


def test_varies_needs_every_curve_to_range_over_more_than_the_value():
    """noise-f11e: the plain line is not horizontal (0.094 to 0.131 over p), the residual one is."""
    frame = pd.concat([rows({"plain": [0.094, 0.11, 0.131]}), rows({"flat": [0.23, 0.234, 0.231]})])
    assert holds("varies", frame[frame["label"] == "plain"], along="block", value=0.02)
    assert not holds("varies", frame, along="block", value=0.02)  # one flat curve fails it
    assert not holds("varies", frame[frame["label"] == "plain"], along="block", value=0.04)  # a range of 0.037: not more
    assert TESTS["varies"].function(frame[frame["label"] == "plain"], along="block", value=0.02)[1] == "least range: 0.094 to 0.131 along block (plain)"


def test_ratio_between_divides_the_cells_means_and_its_bounds_are_inclusive():
    """rskip-f3: 2xSkip+LN's mean norm (3 and 5: 4) over 1xSkip's (2): 2, "approximately twice"."""
    both = pd.concat([rows({"2xSkip+LN": [3.0, 5.0]}), rows({"1xSkip": [2.0, 2.0]})])
    assert holds("ratio_between", both, cells=["2xSkip+LN", "1xSkip"], low=1.5, high=2.5)
    assert holds("ratio_between", both, cells=["2xSkip+LN", "1xSkip"], low=2.0, high=2.0)
    assert not holds("ratio_between", both, cells=["2xSkip+LN", "1xSkip"], low=2.1, high=3)
    assert not holds("ratio_between", both, cells=["1xSkip", "2xSkip+LN"], low=1.5, high=2.5)  # 0.5
    assert TESTS["ratio_between"].function(both, cells=["2xSkip+LN", "1xSkip"], low=1.5, high=2.5)[1] == \
        "2xSkip+LN / 1xSkip: 4 / 2 = 2, in [1.5, 2.5]"


def test_select_first_after_keeps_the_smallest_value_above_it():
    """iter-f9-norms: the first snapshot after initialisation, whatever epochs the scale keeps."""
    frame = pd.concat([rows({"net": [1.0]}, epoch=e) for e in (0, 2, 5)])
    assert sorted(select(frame, {"claim": "c", "select": {"epoch": {"first_after": 0}}})["epoch"]) == [2]
    assert sorted(select(frame, {"claim": "c", "select": {"epoch": {"first_after": 2}}})["epoch"]) == [5]


def test_a_check_on_nets_that_did_not_learn_is_undecided_and_says_why():
    """noise-f6: float64 nets at chance give a difference of exactly 0, which no verdict may read."""
    data = pd.concat([rows({"a": [1.0, 2.0], "b": [1.0, 1.0]}, seed=s) for s in (0, 1)])
    check = {"claim": "c", "test": "rises", "along": "block", "cells": ["a"]}
    assert judge(data, check).verdict == "supported"
    verdict = judge(data, check, {"a": "These nets did not learn at this scale."})
    assert (verdict.verdict, verdict.seeds_holding, verdict.seeds) == ("undecided", 0, 2)
    assert verdict.evidence == "not judged: a: These nets did not learn at this scale."
    assert judge(data, check, {"b": "These nets did not learn."}).verdict == "supported"  # a cell the check does not read


@pytest.mark.parametrize("check", [
    {"test": "rises", "along": "block"}, {"test": "falls", "along": "block"}, {"test": "varies", "along": "block", "value": 0.1},
    {"test": "first_largest", "along": "block"}, {"test": "first_smallest", "along": "block"},
    {"test": "falls_more", "cells": ["a", "b"], "along": "block"}, {"test": "spread_ordered", "cells": ["a", "b"], "along": "block"},
])
def test_a_curve_of_one_point_is_undecided_not_contradicted(check):
    """sas-f3 at a small depth: the middle stage has one block, so there is no curve along the blocks
    to rise, fall or spread. Every test that reads a curve says so instead of failing."""
    data = pd.concat([rows({"a": [2.0], "b": [1.0]}, seed=s) for s in (0, 1)])
    verdict = judge(data, {"claim": "c", **check})
    assert (verdict.verdict, verdict.seeds) == ("undecided", 2)
    assert verdict.evidence.startswith("not judged: ") and ("one point along block" in verdict.evidence or "1 point along block" in verdict.evidence)
    two_points = pd.concat([rows({"a": [4.0, 1.0], "b": [1.0, 1.1]}, seed=s) for s in (0, 1)])
    assert judge(two_points, {"claim": "c", **check}).verdict in ("supported", "contradicted")


def test_a_ratio_over_zero_or_cells_sharing_no_point_are_undecided():
    zero = rows({"a": [1.0, 2.0], "b": [0.0, 0.0]})
    assert judge(zero, {"claim": "c", "test": "ratio_between", "cells": ["a", "b"], "low": 1, "high": 2}).evidence == \
        "not judged: b's mean is 0: no ratio over it"
    apart = pd.concat([rows({"a": [1.0]}), rows({"b": [2.0]}).assign(block=2)])
    verdict = judge(apart, {"claim": "c", "test": "ordered_at_each", "cells": ["a", "b"], "along": "block"})
    assert (verdict.verdict, verdict.evidence) == ("undecided", "not judged: a and b share no point along block")


def test_a_check_needing_more_examples_than_a_value_rests_on_is_undecided():
    """iter-f7: a group of 12 borderline examples, where one of them moves the accuracy 8 points."""
    data = rows({"net": [40.0, 60.0]}).assign(examples=[12, 12])
    check = {"claim": "c", "test": "rises", "along": "block", "min_examples": 30}
    verdict = judge(data, check)
    assert verdict.verdict == "undecided" and "a mean over 12 examples, fewer than the 30" in verdict.evidence
    assert judge(data.assign(examples=[30, 30]), check).verdict == "supported"
    assert "a mean over 1 example, fewer" in judge(data.assign(examples=[1, 1]), check).evidence
    assert judge(data, {k: v for k, v in check.items() if k != "min_examples"}).verdict == "supported"


# A frame on which a check holds and one on which it fails, built from the check alone: its cells,
# its selection, its test. A check that no frame can decide (a selection that leaves nothing, or a
# test whose arguments contradict it) fails here.
def _points(check: dict, column: str, n: int = 4) -> list:
    """n values of `column` that the check's selection keeps."""
    wanted = (check.get("select") or {}).get(column)
    if isinstance(wanted, list):
        return wanted if len(wanted) >= 2 or column != check.get("along") else [wanted[0], wanted[0] + 1]
    if isinstance(wanted, dict) and "first_after" in wanted:
        return [wanted["first_after"] + 1]
    if isinstance(wanted, dict):
        low, high = wanted.get("at_least"), wanted.get("at_most")
        if low is not None and high is not None:
            return [low + (high - low) * k / (n - 1) for k in range(n)]
        return [low + k for k in range(n)] if low is not None else [high - n + 1 + k for k in range(n)]
    if wanted is not None and wanted not in ("max", "min"):
        return [wanted]
    return list(range(1, n + 1)) if column == check.get("along") else [1]


def _pattern(check: dict, labels: list[str], along_values: list, holding: bool) -> dict:
    """{label: value at each point along} for which the check's test holds (or fails)."""
    test, cells, n = check["test"], check.get("cells") or labels, len(along_values)
    rising = [1.0 + k for k in range(n)]
    if test in ("below", "above"):
        value = check["value"]
        inside = value - 1 if test == "below" else value + 1
        return {label: [inside if holding else 2 * value - inside] * n for label in labels}
    if test in ("rises", "falls"):
        up = (test == "rises") == holding
        return {label: rising if up else rising[::-1] for label in labels}
    if test == "varies":
        return {label: [1.0 + (2 * check["value"] * k if holding else 0.0) for k in range(n)] for label in labels}
    if test in ("first_largest", "first_smallest"):
        big_first = (test == "first_largest") == holding
        return {label: [10.0 if big_first else 1.0] + [1.0 if big_first else 10.0] * (n - 1) for label in labels}
    if test == "peak_between":
        inside = [abs(p - (check["low"] + check["high"]) / 2) for p in along_values]
        mode = inside.index(min(inside)) if holding else inside.index(max(inside))
        return {label: [10.0 if k == mode else 1.0 for k in range(n)] for label in labels}
    if test == "ordered":
        means = [float(len(cells) - i) for i in range(len(cells))]
        return {c: [m] * n for c, m in zip(cells, means if holding else means[::-1])}
    if test == "ordered_at_each":
        return {c: [m] * n for c, m in zip(cells, (2.0, 1.0) if holding else (1.0, 2.0))}
    if test in ("falls_more", "spread_ordered"):
        steep, level = [2.0 ** (n - k) for k in range(n)], [2.0] * n
        return dict(zip(cells, (steep, level) if holding else (level, steep)))
    if test == "ratio_between":
        middle = (check["low"] + check["high"]) / 2
        return dict(zip(cells, ([middle] * n, [1.0] * n) if holding else ([2 * check["high"] + 1] * n, [1.0] * n)))
    raise AssertionError(f"no frame for test {test!r}: add one here")


def decisive_frame(figure: dict, check: dict, holding: bool) -> pd.DataFrame:
    labels = [d["label"] for d in figure.get("differences", [])] or [c["label"] for c in figure["cells"]]
    along = check.get("along")
    columns = [c for c in dict.fromkeys([*(check.get("select") or {}), *(check.get("mean_over") or [])]) if c != along]
    along_values = _points(check, along, 3 if check["test"] == "peak_between" else 4) if along else [None]
    if check["test"] == "peak_between":
        along_values = [check["low"] - 1, (check["low"] + check["high"]) / 2, check["high"] + 1]
    values = _pattern(check, labels, along_values, holding)
    frame = []
    for seed in (0, 1):
        for label, curve in values.items():
            for point, value in zip(along_values, curve):
                base = {"figure": "f", "label": label, "run": f"{label}/seed{seed}", "seed": seed, "value": value,
                        "examples": check.get("min_examples", 100)}
                if along:
                    base[along] = point
                variants = [base]
                for column in columns:  # a column averaged away takes two values; a selected one, what it keeps
                    kept = _points(check, column, 2) if column in (check.get("mean_over") or []) else _points(check, column)[:1]
                    variants = [{**v, column: k} for v in variants for k in kept]
                frame += variants
    return pd.DataFrame(frame)


def _every_check(figures: dict) -> list:
    return [pytest.param(entry, check, id=f"{fid} check {i}")
            for fid, entry in figures.items() for i, check in enumerate(entry.get("checks", []), 1)]


@pytest.mark.parametrize("figure, check", _every_check(load_figures("tests/fixtures/config/figures")))
def test_every_check_holds_on_one_frame_and_fails_on_another(figure, check):
    """No check of the papers' figures is vacuous or impossible by the way it is written: a frame of
    its own cells and selection supports it, and one contradicts it."""
    assert judge(decisive_frame(figure, check, True), check).verdict == "supported"
    assert judge(decisive_frame(figure, check, False), check).verdict == "contradicted"


@pytest.mark.config
def test_every_check_of_config_holds_on_one_frame_and_fails_on_another():
    for param in _every_check(load_figures("config/figures")):
        figure, check = param.values
        assert judge(decisive_frame(figure, check, True), check).verdict == "supported", param.id
        assert judge(decisive_frame(figure, check, False), check).verdict == "contradicted", param.id


def _quoted(source: str) -> list[str]:
    return re.findall(r'"([^"]+)"', source)


@pytest.mark.parametrize("directory", ["tests/fixtures/config/figures", pytest.param("config/figures", marks=pytest.mark.config)])
def test_every_check_quotes_the_sentence_it_tests(directory):
    """A check is the paper's sentence made testable: each says where, and quotes it."""
    unquoted = [f"{fid} check {i}" for fid, entry in load_figures(directory).items()
                for i, check in enumerate(entry.get("checks", []), 1) if not _quoted(check["source"])]
    assert unquoted == []


PAPERS = os.environ.get("RESREPRO_PAPERS")  # a folder of the papers' plain texts (000_*.txt ... 003_*.txt)
PAPER_FILES = {"sas": "000_", "rskip": "001_", "noise": "002_", "iter": "003_"}


@pytest.mark.config
@pytest.mark.skipif(not PAPERS, reason="RESREPRO_PAPERS names no folder of the papers' texts (the project does not hold them)")
def test_every_checks_quote_is_in_its_paper():
    """Each quoted passage (its parts between " ... ") is in the paper's text, whitespace, case,
    punctuation and hyphenation at line ends aside."""
    def plain(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())

    texts = {paper: plain(next(Path(PAPERS).glob(f"{prefix}*.txt")).read_text()) for paper, prefix in PAPER_FILES.items()}
    missing = [f"{fid} check {i}: {part!r}" for fid, entry in load_figures("config/figures").items()
               for i, check in enumerate(entry.get("checks", []), 1)
               for quote in _quoted(check["source"]) for part in quote.split(" ... ") if plain(part) not in texts[entry["paper"]]]
    assert missing == []
