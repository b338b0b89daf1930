"""The judge's and the parameter counts' tables: what they decide, and that the report reads back
exactly what was decided (figure_checks.csv, claims.csv, parameters.csv)."""

import json

import pandas as pd
from fake_runs import CLAIMS, FIGURES, TABLES, plan_for

from resrepro.analysis import figure_checks
from resrepro.analysis.claims import load_claims, summarise
from resrepro.analysis.judgement import CHECK_COLUMNS, CLAIM_COLUMNS, judge, judge_figures, read_claims, read_figure_checks
from resrepro.analysis.parameters import parameter_counts, parameters_at_paper_size, read_counts
from resrepro.experiments import load_figures, load_tables, plan_document
from resrepro.specs import TableRow

SAS_F3 = load_figures([f"{FIGURES}/sas.yaml"])
TABLES = load_tables(TABLES)


def gates(seeds: dict[int, float]) -> pd.DataFrame:
    """sas-f3's rows (figures.csv) for these seeds, beta rising by `step` a block in each."""
    return pd.DataFrame([{"figure": "sas-f3", "cell": 0, "label": "SAS (LN)", "run": f"r/seed{s}", "seed": s, "block": b,
                          "quantity": q, "value": v}
                         for s, step in seeds.items() for b in (1, 2, 3)
                         for q, v in (("alpha", 0.95), ("beta", step * b), ("gamma", 0.05 / b))])


def cells(figure: str = "sas-f3") -> pd.DataFrame:
    return pd.DataFrame([{"figure": figure, "cell": 0, "label": "SAS (LN)", "measurement": "sas_gates", "kind": "per_block", "n": 2,
                          "n_runs": 2, "summary": "s"}])


def test_figure_checks_read_back_as_judged(tmp_path):
    """Two seeds that disagree on beta's rise: inconclusive, 1/2; the other checks supported 2/2.
    The report's reading of figure_checks.csv gives the very verdicts judged in memory."""
    data = gates({0: 0.1, 1: -0.1})
    out = judge_figures({"sas-f3": SAS_F3["sas-f3"]}, data, cells())
    out["figure_checks"].to_csv(tmp_path / "figure_checks.csv", index=False)
    read = read_figure_checks(tmp_path / "figure_checks.csv")
    expected = [figure_checks.judge(data, check) for check in SAS_F3["sas-f3"]["checks"]]
    assert read == {"sas-f3": expected}
    assert [(v.verdict, v.seeds_holding, v.seeds) for v in expected] == [("supported", 2, 2), ("inconclusive", 1, 2), ("supported", 2, 2)]
    assert list(out["figure_checks"]["check"]) == [1, 2, 3] and out["figure_differences"].empty and out["difference_cells"].empty


def test_a_figure_not_measured_or_not_reproduced_is_not_judged():
    figures = load_figures([f"{FIGURES}/sas.yaml", f"{FIGURES}/noise.yaml"])
    out = judge_figures(figures, gates({0: 0.1}), cells())
    assert set(out["figure_checks"]["figure"]) == {"sas-f3"}


def test_claims_are_judged_over_the_rows_and_the_checks_and_read_back(tmp_path):
    """tests/fixtures/config/claims.yaml over sas-t7's rows and sas-f3's checks: claims.csv holds, per paper and
    in the file's order, what analysis/claims.py decides; a cited figure this run did not measure
    is named as not in this run, a measured one is not."""
    plan = plan_for(["sas-t7"], seeds=2)
    document = plan_document("tiny", TABLES, load_figures(FIGURES), CLAIMS, plan.rows, [])
    rows = pd.DataFrame([{"table": "sas-t7", "label": r["label"], "verdict": v, "n": 2, "n_diverged": 0}
                         for r, v in zip(plan.rows, ["baseline", "supported", "contradicted"], strict=True)])
    rows.to_csv(tmp_path / "rows.csv", index=False)
    gates({0: 0.1, 1: 0.2}).to_csv(tmp_path / "figures.csv", index=False)
    cells().to_csv(tmp_path / "figure_cells.csv", index=False)
    out = judge(document, tmp_path)
    out["claims"].to_csv(tmp_path / "claims.csv", index=False)
    checked = {"sas-f3": [figure_checks.judge(gates({0: 0.1, 1: 0.2}), c) for c in SAS_F3["sas-f3"]["checks"]]}
    stated = load_claims(CLAIMS, TABLES, document["figures"])
    expected = summarise(stated, pd.read_csv(tmp_path / "rows.csv"), checked)
    assert read_claims(tmp_path / "claims.csv") == expected
    by_source = {c["source"]: c for c in expected["sas"]}
    assert (by_source["SAS, Sec. 5, Figure 3"]["verdict"], by_source["SAS, Sec. 5, Figure 3"]["evidence"]) == (
        "supported", "sas-f3: 3 supported of 3 checks")
    assert by_source["SAS, Sec. 5, Figure 4"]["evidence"] == "not in this run: sas-f4"
    assert (by_source["SAS, Sec. 5, Table 7"]["verdict"], by_source["SAS, Sec. 5, Table 7"]["evidence"]) == (
        "inconclusive", "sas-t7: 1 supported, 1 contradicted of 2 rows")
    assert list(out["claims"]["paper"].drop_duplicates()) == list(stated)
    first = expected[next(iter(stated))][0]
    assert json.loads(out["claims"]["cited"].iloc[0]) == [list(pair) for pair in first["cited"]]


def test_parameter_counts_are_those_of_the_rows_that_show_them(tmp_path):
    """rskip-t7 (translation: every row shows its count beside the vocabulary) and sas-t7 (a
    classification table of the paper's rows without counts: none); parameters.csv reads back."""
    plan = plan_for(["rskip-t7", "sas-t7"], seeds=1)
    counts = parameter_counts(plan.rows, TABLES)
    assert set(counts["table"]) == {"rskip-t7"} and len(counts) == sum(r["table"] == "rskip-t7" for r in plan.rows)
    big = next(r for r in plan.rows if r["label"] == "EN-DE Big")
    assert counts.set_index("label").loc["EN-DE Big", "parameters_at_paper_size"] == parameters_at_paper_size(
        TableRow.from_dict(TABLES["rskip-t7"]["rows"][big["row"]]), "translation") == 209_838_080
    counts.to_csv(tmp_path / "parameters.csv", index=False)
    assert read_counts(tmp_path / "parameters.csv") == {(r["table"], r["label"]): r["parameters_at_paper_size"] for _, r in counts.iterrows()}


def test_each_checks_resolvable_difference_and_empty_text_read_back_as_written(tmp_path):
    """figure_checks.csv keeps a check's resolvable difference (a number, or empty where the check
    has none) and an empty evidence line or a claim that reads "NA" as written, not as NaN."""
    written = [figure_checks.FigureVerdict("beta rises", "supported", 2, 2, "", 0.25),
               figure_checks.FigureVerdict("NA", "inconclusive", 1, 2, "seed 1: beta falls", None)]
    pd.DataFrame([{"figure": "sas-f3", "check": i, **v.__dict__} for i, v in enumerate(written, 1)],
                 columns=CHECK_COLUMNS).to_csv(tmp_path / "figure_checks.csv", index=False)
    assert read_figure_checks(tmp_path / "figure_checks.csv") == {"sas-f3": written}


def test_claims_read_back_with_their_empty_fields_as_written(tmp_path):
    claims = pd.DataFrame([{"paper": "sas", "claim": "NA", "source": "", "cited": json.dumps([["sas-t4", "SAS"]]),
                            "verdict": "not run", "evidence": ""}], columns=CLAIM_COLUMNS)
    claims.to_csv(tmp_path / "claims.csv", index=False)
    assert read_claims(tmp_path / "claims.csv") == {"sas": [{"claim": "NA", "source": "", "cited": [("sas-t4", "SAS")],
                                                             "verdict": "not run", "evidence": ""}]}


def test_every_figure_of_differences_keeps_its_difference_cells():
    """Two figures that draw differences (noise-f9b under a second id): each keeps its own four."""
    figures = load_figures([f"{FIGURES}/noise.yaml"])
    entry = figures["noise-f9b"]
    base = {"PlnNet-32": [2.0, 1.5], "PlnNet-44": [2.3, 1.8], "ResNet-32": [1.9, 1.1], "ResNet-44": [2.0, 1.2]}
    data = pd.DataFrame([{"figure": f, "cell": i, "label": label, "run": f"{label}/seed{s}", "seed": s, "epoch": e + 1,
                          "quantity": "training loss", "value": v + 0.01 * s}
                         for f in ("noise-f9b", "copy") for i, (label, curve) in enumerate(base.items()) for s in (0, 1)
                         for e, v in enumerate(curve)])
    cells = pd.DataFrame([{"figure": f, "cell": i, "label": label, "measurement": "learning_curve", "kind": "per_epoch", "n": 2,
                           "n_runs": 2, "summary": "s"} for f in ("noise-f9b", "copy") for i, label in enumerate(base)])
    out = judge_figures({"noise-f9b": entry, "copy": entry}, data, cells)
    assert list(out["difference_cells"]["figure"]) == ["noise-f9b"] * 4 + ["copy"] * 4
    assert len(out["figure_checks"]) == 2 * len(entry["checks"])
