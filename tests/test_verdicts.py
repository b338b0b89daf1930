"""The verdict pipeline end to end: metrics files -> aggregate() -> rows with their verdicts.

Runs come from the real plan (experiments.make_plan on the tiny config, 3 seeds), their
metrics.json files are written by hand with chosen test errors, and every reported number of a
row (mean, std, delta, difference, p, resolvable effect, verdict, reason) is checked against
scipy's Welch test and a hand computation (two-sided alpha 0.05, 80% power).
"""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from fake_runs import TABLES, plan_for, write_metrics
from scipy import stats as scipy_stats

from resrepro.analysis import aggregate as aggregate_module
from resrepro.analysis import stats
from resrepro.analysis.aggregate import aggregate


def aggregate_with(tmp_path, tables: list[str], errors_by_variant: dict[str, list[float]]):
    """Write each run's final test error (by variant id, one value per seed), aggregate, index rows by label."""
    plan = plan_for(tables)
    for path, run in plan.runs.items():
        write_metrics(tmp_path, path, errors_by_variant[run.variant_id][run.seed])
    rows = aggregate(plan.rows, tmp_path, TABLES, "final")["rows"]
    return rows.set_index("label")


def welch_by_hand(a: list[float], b: list[float]) -> dict:
    """Welch's t-test and the resolvable effect, written out from the textbook formulas."""
    na, nb = len(a), len(b)
    ma, mb = sum(a) / na, sum(b) / nb
    va = sum((x - ma) ** 2 for x in a) / (na - 1)
    vb = sum((x - mb) ** 2 for x in b) / (nb - 1)
    se = math.sqrt(va / na + vb / nb)
    df = (va / na + vb / nb) ** 2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))
    t = (ma - mb) / se
    p = 2 * scipy_stats.t.sf(abs(t), df)
    resolvable = (scipy_stats.t.ppf(0.975, df) + scipy_stats.t.ppf(0.8, df)) * se
    return {"difference": ma - mb, "p": p, "resolvable": resolvable, "df": df}


# -------------------------------------------------------------------- the formula, by hand


def test_welch_and_resolvable_effect_against_hand_computed_constants():
    """[1, 2, 3] vs [4, 5, 6]: variances 1, se = sqrt(2/3), df = 4, t = -3.674;
    p = 0.021312 (t distribution, 4 df), resolvable = (t_.975,4 + t_.80,4) * se
    = (2.776445 + 0.940965) * 0.816497 = 3.035252."""
    v = stats.compare([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], 1.0, 4.0, higher_is_better=False)
    assert v.difference == pytest.approx(-3.0)
    assert v.p_value == pytest.approx(0.0213116, abs=1e-6)
    assert v.resolvable == pytest.approx(3.035252, abs=1e-5)
    assert v.verdict == "supported"


def test_unequal_variances_and_sizes_use_welchs_degrees_of_freedom():
    a, b = [10.0, 10.5, 12.0, 9.0, 11.5], [8.0, 8.1, 7.9]
    v = stats.compare(a, b, 2.0, 1.0, higher_is_better=True)
    hand = welch_by_hand(a, b)
    assert v.p_value == pytest.approx(scipy_stats.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-12)
    assert v.p_value == pytest.approx(hand["p"], rel=1e-9)
    assert v.resolvable == pytest.approx(hand["resolvable"], rel=1e-9)
    assert 4 < hand["df"] < 5  # not the pooled n-2 = 6


def test_zero_variance_on_both_sides():
    """se = 0: no test is possible. Equal means: p = 1 (inconclusive); different means: p = 0,
    the sign decides; the resolvable effect is 0."""
    tie = stats.compare([6.0, 6.0, 6.0], [6.0, 6.0, 6.0], 6.5, 6.0, higher_is_better=False)
    assert (tie.verdict, tie.p_value, tie.difference, tie.resolvable) == ("inconclusive", 1.0, 0.0, 0.0)
    apart = stats.compare([7.0, 7.0, 7.0], [6.0, 6.0, 6.0], 6.5, 6.0, higher_is_better=False)
    assert (apart.verdict, apart.p_value, apart.difference, apart.resolvable) == ("supported", 0.0, 1.0, 0.0)
    against = stats.compare([5.0, 5.0, 5.0], [6.0, 6.0, 6.0], 6.5, 6.0, higher_is_better=False)
    assert (against.verdict, against.p_value, against.difference) == ("contradicted", 0.0, -1.0)


def test_significance_threshold_is_alpha_strictly():
    """p just above 0.05 is inconclusive, just below is a verdict."""
    base = [0.0, 1.0, 2.0]
    # find shifts giving p on either side of 0.05 (df = 4 here, equal variances)
    below = stats.compare([x + 2.4 for x in base], base, 1.0, 0.0, higher_is_better=True)
    above = stats.compare([x + 2.1 for x in base], base, 1.0, 0.0, higher_is_better=True)
    assert below.p_value < 0.05 < above.p_value
    assert (below.verdict, above.verdict) == ("supported", "inconclusive")


def test_p_equal_to_alpha_is_not_significant(monkeypatch):
    """The rule is p < alpha; no data gives p = 0.05 exactly, so the test's p is set."""
    monkeypatch.setattr(stats.stats, "ttest_ind", lambda a, b, equal_var: SimpleNamespace(pvalue=stats.ALPHA))
    v = stats.compare([2.0, 3.0, 4.0], [0.0, 1.0, 2.0], 1.0, 0.0, higher_is_better=True)
    assert (v.verdict, v.p_value) == ("inconclusive", 0.05)


@pytest.mark.parametrize(
    "paper_row, paper_base, higher, word",
    [(6.0, 6.3, False, "better"), (6.6, 6.3, False, "worse"), (94.0, 93.5, True, "better"), (93.0, 93.5, True, "worse")],
)
def test_direction_words(paper_row, paper_base, higher, word):
    v = stats.compare([1.0, 2.0, 3.0], [1.5, 2.5, 3.5], paper_row, paper_base, higher)
    assert v.reason == f"the paper reports {word}; difference not significant at 0.05"


def test_fewer_than_two_seeds_and_no_claim():
    one = stats.compare([5.0], [6.0, 6.1, 6.2], 5.0, 6.0, False)
    assert (one.verdict, one.p_value, one.resolvable) == ("inconclusive", None, None)
    assert one.difference == pytest.approx(5.0 - 6.1)
    assert stats.compare([5.0, 5.1], [6.0], 5.0, 6.0, False).verdict == "inconclusive"
    assert stats.compare([5.0], [], 5.0, 6.0, False).difference is None
    assert one.reason == "needs at least 2 finished seeds on each side"  # the report's reason cell
    same = stats.compare([5.0, 5.1], [6.0, 6.1], 6.0, 6.0, False)
    assert (same.verdict, same.p_value, same.difference) == ("no claim", None, None)
    assert same.reason == "the paper reports the same value as its baseline"


# ------------------------------------------------------------------- end to end: aggregate()

# rskip-t1 (test error, lower is better) at 3 seeds. Baseline row "1xSkip" is the `add` cell.
T1_ERRORS = {
    "add": [6.0, 6.3, 6.6],
    "rskip_ln-lam2": [5.0, 5.2, 5.4],  # paper 6.02 < 6.31: claimed better; reproduced lower -> supported
    "xskip-lam2": [5.1, 5.3, 5.5],  # paper 8.41 > 6.31: claimed worse; reproduced better -> contradicted
    "xskip-lam3": [5.5, 6.5, 7.4],  # paper 9.23: claimed worse; overlapping -> inconclusive
    "xskip_ln": [7.0, 7.0, 7.0],  # with "xskip_ln-lam2" below: the zero-variance branch
    "xskip_ln-lam2": [6.3, 6.3, 6.3],
    "xskip_ln-lam3": [6.1, 6.3, 6.5],
    "rskip_ln-lam3": [6.0, 6.3, 6.6],  # identical to the baseline: difference 0, p = 1
}


def test_aggregate_verdicts_for_a_lower_is_better_table(tmp_path):
    rows = aggregate_with(tmp_path, ["rskip-t1"], T1_ERRORS)
    base = T1_ERRORS["add"]
    for label, variant, verdict, word in [
        ("2rSkip+LN", "rskip_ln-lam2", "supported", "better"),
        ("2xSkip", "xskip-lam2", "contradicted", "worse"),
        ("3xSkip", "xskip-lam3", "inconclusive", "worse"),
        ("3xSkip+LN", "xskip_ln-lam3", "inconclusive", "better"),
    ]:
        row, values = rows.loc[label], T1_ERRORS[variant]
        hand = welch_by_hand(values, base)
        assert row["verdict"] == verdict, label
        assert row["difference"] == pytest.approx(hand["difference"])
        assert row["p_value"] == pytest.approx(scipy_stats.ttest_ind(values, base, equal_var=False).pvalue, rel=1e-9)
        assert row["resolvable"] == pytest.approx(hand["resolvable"], rel=1e-9)
        assert row["reason"].startswith(f"the paper reports {word};"), label
        assert row["mean"] == pytest.approx(sum(values) / 3)
        assert row["std"] == pytest.approx(scipy_stats.tstd(values))
        assert row["delta"] == pytest.approx(sum(values) / 3 - row["paper"])
        assert json.loads(row["values"]) == values
        assert (row["n"], row["n_runs"], row["baseline"]) == (3, 3, "1xSkip")
    assert rows.loc["2rSkip+LN", "reason"] == "the paper reports better; reproduced the same direction"
    assert rows.loc["2xSkip", "reason"] == "the paper reports worse; reproduced the opposite"
    assert rows.loc["2rSkip+LN", "p_value"] < 0.05 and rows.loc["2xSkip", "p_value"] < 0.05 and rows.loc["3xSkip", "p_value"] > 0.05

    same = rows.loc["3rSkip+LN"]  # identical seeds to the baseline
    assert (same["verdict"], same["p_value"], same["difference"]) == ("inconclusive", 1.0, 0.0)
    assert rows.loc["1xSkip", "verdict"] == "baseline" and math.isnan(rows.loc["1xSkip", "p_value"])
    # "Baseline (He et al. 2016b)" shares the baseline's cell: the same runs cannot test each other
    assert rows.loc["Baseline (He et al. 2016b)", "verdict"] == "no claim"
    assert math.isnan(rows.loc["Baseline (He et al. 2016b)", "difference"])


def test_aggregate_zero_variance_branch(tmp_path):
    """Every seed equal on both sides: the row's verdict comes from the sign alone, resolvable 0."""
    errors = {v: [6.3, 6.3, 6.3] for v in T1_ERRORS} | {"xskip_ln": [7.0, 7.0, 7.0], "rskip_ln-lam2": [5.0, 5.0, 5.0]}
    rows = aggregate_with(tmp_path, ["rskip-t1"], errors)
    worse = rows.loc["1xSkip+LN"]  # paper: worse (7.72 vs 6.31); reproduced 7.0 vs 6.3
    assert (worse["verdict"], worse["p_value"], worse["resolvable"]) == ("supported", 0.0, 0.0)
    assert worse["difference"] == pytest.approx(0.7) and worse["std"] == 0.0
    better = rows.loc["2rSkip+LN"]  # paper: better (6.02); reproduced 5.0: the same direction
    assert (better["verdict"], better["p_value"]) == ("supported", 0.0)
    tie = rows.loc["2xSkip"]  # paper: worse; reproduced exactly equal
    assert (tie["verdict"], tie["p_value"], tie["difference"], tie["resolvable"]) == ("inconclusive", 1.0, 0.0, 0.0)


def test_aggregate_verdicts_for_a_higher_is_better_table(tmp_path):
    """sas-t7 reports accuracy = 100 - error: the direction flips against the error files."""
    errors = {"add": [6.0, 6.3, 6.6], "sas": [5.0, 5.2, 5.4], "sas-normbn": [4.9, 5.1, 5.3]}
    rows = aggregate_with(tmp_path, ["sas-t7"], errors)
    acc = {v: [100.0 - e for e in errs] for v, errs in errors.items()}
    ln, bn = rows.loc["SAS with LN"], rows.loc["SAS with BN"]
    assert ln["verdict"] == "supported" and ln["reason"] == "the paper reports better; reproduced the same direction"
    assert bn["verdict"] == "contradicted" and bn["reason"] == "the paper reports worse; reproduced the opposite"
    for row, variant in ((ln, "sas"), (bn, "sas-normbn")):
        hand = welch_by_hand(acc[variant], acc["add"])
        assert row["difference"] == pytest.approx(hand["difference"]) and row["difference"] > 0
        assert row["p_value"] == pytest.approx(hand["p"], rel=1e-9)
        assert row["resolvable"] == pytest.approx(hand["resolvable"], rel=1e-9)
        assert row["mean"] == pytest.approx(sum(acc[variant]) / 3)
        assert json.loads(row["values"]) == pytest.approx(acc[variant])
    base = rows.loc["x + F (Baseline)"]
    assert base["verdict"] == "baseline" and base["mean"] == pytest.approx(100.0 - 6.3)
    assert base["delta"] == pytest.approx(100.0 - 6.3 - 93.66) and bool(base["higher_is_better"])


def test_aggregate_counts_diverged_seeds_out_of_the_mean_and_the_test(tmp_path):
    errors = {"add": [6.0, 6.3, 6.6], "sas": [5.0, None, 5.4], "sas-normbn": [None, None, None]}
    rows = aggregate_with(tmp_path, ["sas-t7"], errors)
    ln = rows.loc["SAS with LN"]
    assert (ln["n"], ln["n_runs"], ln["n_diverged"]) == (2, 3, 1)
    assert json.loads(ln["values"]) == [95.0, "diverged", 94.6]
    hand = welch_by_hand([95.0, 94.6], [94.0, 93.7, 93.4])
    assert ln["p_value"] == pytest.approx(hand["p"], rel=1e-9) and ln["mean"] == pytest.approx(94.8)
    bn = rows.loc["SAS with BN"]
    assert (bn["n"], bn["n_diverged"], bn["verdict"]) == (0, 3, "no result")


def test_paired_resolvable_by_hand():
    """Differences 1, 2, 3: sd 1, n 3, df 2; (t 0.975 + t 0.8) x sd / sqrt(n) = (4.302653 + 1.060660) / sqrt(3)."""
    assert stats.paired_resolvable([1.0, 2.0, 3.0]) == pytest.approx(5.363313 / 3 ** 0.5, rel=1e-6)
    assert stats.paired_resolvable([2.0, 4.0, 6.0]) == pytest.approx(2 * 5.363313 / 3 ** 0.5, rel=1e-6)  # twice the spread
    assert stats.paired_resolvable([5.0, 5.0]) == 0.0  # no spread: any difference is resolved
    assert stats.paired_resolvable([1.0]) is None and stats.paired_resolvable([]) is None


def test_seeds_needed_by_hand():
    """Variances 1 and 1, the paper's difference 3: with n per side the test resolves
    (t_0.975 + t_0.8) * sqrt(2 / n) at df = 2 (n - 1) (Welch-Satterthwaite for equal variances),
    from a t table: n = 2: (4.303 + 1.061) * 1 = 5.36; n = 3: (2.776 + 0.941) * 0.8165 = 3.035, just
    above 3; n = 4: (2.447 + 0.906) * 0.7071 = 2.371. So 4 seeds per side; the sign of the
    difference does not matter."""
    row, base = [1.0, 2.0, 3.0], [2.0, 3.0, 4.0]
    assert stats.detectable((1.0, 1.0), 2) == pytest.approx(5.363, abs=2e-3)
    assert stats.detectable((1.0, 1.0), 3) == pytest.approx(3.035, abs=2e-3)
    assert stats.detectable((1.0, 1.0), 4) == pytest.approx(2.371, abs=2e-3)
    assert stats.seeds_needed(row, base, 3.0) == 4 and stats.seeds_needed(row, base, -3.0) == 4
    assert stats.seeds_needed(row, base, 3.04) == 3  # just past n = 3's 3.035
    assert stats.seeds_needed(row, base, 5.4) == 2
    # unequal variances (4 and 0): df = (n - 1), 16 / 16; n = 5: (2.776 + 0.941) * sqrt(4 / 5) = 3.325
    assert stats.detectable((4.0, 0.0), 5) == pytest.approx(3.325, abs=2e-3)
    assert stats.seeds_needed([0.0, 2.0, 4.0], [1.0, 1.0, 1.0], 3.33) == 5


@pytest.mark.parametrize("row, base", [([1.0, 2.0, 3.0], [2.0, 3.0, 4.0]), ([0.0, 2.0, 4.0], [1.0, 1.0, 1.0]),
                                       ([5.0, 5.1], [4.0, 9.0, 1.0]), ([10.0, 30.0, 20.0], [0.5, 0.7])])
def test_seeds_needed_is_the_first_n_a_scan_finds(row, base):
    """The search bisects, as detectable falls with n: its answer is the first n = 2..most of a
    plain scan, for effects from trivially resolved to beyond `most`."""
    variances = (float(np.var(row, ddof=1)), float(np.var(base, ddof=1)))
    for effect in (0.01, 0.3, 1.0, 2.5, 7.0, 40.0):
        scan = next((n for n in range(2, 301) if stats.detectable(variances, n) <= effect), math.inf)
        assert stats.seeds_needed(row, base, effect, most=300) == scan, effect


def test_detectable_and_seeds_needed_at_their_boundaries():
    """Variances 1 and 4: df = 25 (n - 1) / 17 (Welch-Satterthwaite written out). An effect exactly
    at detectable(n) is resolved by n seeds (<=); the search stops at `most` seeds inclusive."""
    df = 25 * 2 / 17
    expected = (scipy_stats.t.ppf(0.975, df) + scipy_stats.t.ppf(0.8, df)) * math.sqrt(5 / 3)
    assert stats.detectable((1.0, 4.0), 3) == pytest.approx(expected, rel=1e-12)
    row, base = [1.0, 2.0, 3.0], [2.0, 3.0, 4.0]  # variances 1 and 1: detectable(4) = 2.371, detectable(5) = 2.021
    assert stats.seeds_needed(row, base, stats.detectable((1.0, 1.0), 4)) == 4
    assert stats.seeds_needed(row, base, 2.1, most=5) == 5 and stats.seeds_needed(row, base, 2.1, most=4) == math.inf
    assert stats.detectable((1.0, 1.0), 16) > 1.0 >= stats.detectable((1.0, 1.0), 17)  # 1.024 and 0.991
    assert stats.seeds_needed(row, base, 1.0) == 17
    # the default search ends at 1000 seeds: detectable(1000) = 0.12535, detectable(999) = 0.12541
    assert stats.seeds_needed(row, base, 0.12536) == 1000 and stats.seeds_needed(row, base, 0.12534) == math.inf


def test_seeds_needed_edges():
    assert stats.seeds_needed([1.0, 2.0], [1.0, 2.0], 0.001) == math.inf  # past 1000 seeds
    assert stats.seeds_needed([1.0, 2.0], [1.0, 2.0], 0.0) is None  # no difference to resolve
    assert stats.seeds_needed([1.0], [1.0, 2.0], 1.0) is None  # no spread on one side
    assert stats.seeds_needed([1.0, 1.0], [2.0, 2.0], 0.5) == 2  # no spread at all: the smallest test


def test_the_papers_own_runs_could_resolve_its_difference():
    row, base = [1.0, 2.0, 3.0], [2.0, 3.0, 4.0]  # variances 1 and 1: 3 resolves with 4 seeds, not with 3
    assert stats.paper_could_resolve(4, row, base, 3.0, same_data=True) is True
    assert stats.paper_could_resolve(3, row, base, 3.0, same_data=True) is False
    assert stats.paper_could_resolve(1, row, base, 100.0, same_data=True) is False  # one run: no spread to test, whatever the difference
    assert stats.paper_could_resolve(1, row, base, 100.0, same_data=False) is False  # ... on any data
    assert stats.paper_could_resolve(3, row, base, 3.0, same_data=False) is None  # another dataset's spread says nothing of the paper's
    assert stats.paper_could_resolve(None, row, base, 3.0, same_data=True) is None  # the paper does not say
    assert stats.paper_could_resolve(5, [1.0], base, 3.0, same_data=True) is None  # this run shows no spread to judge by
    assert stats.paper_could_resolve(5, row, base, 0.0, same_data=True) is None
    assert stats.paper_could_resolve(2, row, base, 5.4, same_data=True) is True  # two runs have a spread: detectable(2) = 5.363
    assert stats.paper_could_resolve(3, row, base, 3.04, same_data=True) is True  # just past detectable(3) = 3.035 ...
    assert stats.paper_could_resolve(3, row, base, 3.03, same_data=True) is False  # ... and just short of it
    assert stats.paper_could_resolve(4, row, base, stats.detectable((1.0, 1.0), 4), same_data=True) is True  # at it exactly
    # two seeds of a row suffice for a spread (variances 2 and 4: detectable(3) = 5.45)
    assert stats.paper_could_resolve(3, [2.0, 4.0], [1.0, 3.0, 5.0], 5.5, same_data=True) is True
    assert stats.paper_could_resolve(3, [2.0, 4.0], [1.0, 3.0, 5.0], 5.4, same_data=True) is False
    assert stats.paper_could_resolve(3, [1.0, 3.0, 5.0], [2.0, 4.0], 5.5, same_data=True) is True  # on either side
    assert stats.paper_could_resolve(3, [1.0, 1.0], [2.0, 2.0], 0.1, same_data=True) is True  # no spread at all: any difference
    assert stats.paper_could_resolve(3, [0.0, 1.0], [0.0, 0.0], 0.1, same_data=True) is False  # variances 0.5 and 0 sum to 0.5, not 0


def test_aggregate_gives_each_compared_row_its_seeds_needed_and_the_papers_runs(tmp_path, monkeypatch):
    """rskip-t1 (5 runs, its caption): each row's seeds needed for the paper's difference at the
    spreads of its seeds and its baseline's; 2xSkip+LN's 0.02 gain is beyond what 5 runs resolve.
    Whether the paper's runs resolve is judged only on the paper's own data: the tiny config runs
    digits for CIFAR-10, so the runs are told they ran on cifar10 here, and on digits it is left open."""
    on_digits = aggregate_with(tmp_path / "digits", ["rskip-t1"], T1_ERRORS)
    assert on_digits["paper_resolved"].isna().all() and (on_digits["paper_runs"].dropna() == 5).all()
    read_run = aggregate_module.read_run
    monkeypatch.setattr(aggregate_module, "read_run", lambda *a: {**read_run(*a), "dataset": "cifar10"})
    rows = aggregate_with(tmp_path / "cifar10", ["rskip-t1"], T1_ERRORS)
    base = T1_ERRORS["add"]
    for label, variant, paper in [("2rSkip+LN", "rskip_ln-lam2", 6.02), ("2xSkip+LN", "xskip_ln-lam2", 6.29), ("2xSkip", "xskip-lam2", 8.41)]:
        row = rows.loc[label]
        assert row["seeds_needed"] == stats.seeds_needed(T1_ERRORS[variant], base, paper - 6.31), label
        assert row["paper_runs"] == 5
        assert bool(row["paper_resolved"]) == (stats.detectable((scipy_stats.tvar(T1_ERRORS[variant]), scipy_stats.tvar(base)), 5) <= abs(paper - 6.31))
    assert not rows.loc["2xSkip+LN", "paper_resolved"]
    assert math.isnan(rows.loc["1xSkip", "seeds_needed"])  # the baseline: nothing to compare


def test_a_row_beyond_the_papers_is_better_worse_or_no_different_from_its_baseline():
    """No paper value: the direction is the data's. Errors 1.0-1.2 against 2.0-2.2 are better when
    lower is better and worse when higher is; overlapping seeds are no difference."""
    lower = stats.compare_new([1.0, 1.2, 1.1], [2.0, 2.1, 2.2], higher_is_better=False)
    assert lower.verdict == "better" and lower.difference == pytest.approx(-1.0) and lower.p_value < 0.05
    assert lower.p_value == pytest.approx(scipy_stats.ttest_ind([1.0, 1.2, 1.1], [2.0, 2.1, 2.2], equal_var=False).pvalue)
    assert stats.compare_new([1.0, 1.2, 1.1], [2.0, 2.1, 2.2], higher_is_better=True).verdict == "worse"
    assert stats.compare_new([2.0, 2.1, 2.2], [1.0, 1.2, 1.1], higher_is_better=True).verdict == "better"
    same = stats.compare_new([1.0, 2.0], [1.1, 2.1], higher_is_better=False)
    assert same.verdict == "no difference" and same.p_value > 0.05
    assert stats.compare_new([1.0], [2.0, 2.1], higher_is_better=False).verdict == "inconclusive"
