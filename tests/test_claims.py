"""The papers' claims (config/claims.yaml) and the verdict each gets from its evidence."""

from pathlib import Path

import pandas as pd
import pytest

from resrepro.analysis import claims
from resrepro.analysis.claims import Reference, claim_verdict, evidence_line, load_claims, parse_reference, summarise
from resrepro.analysis.figure_checks import FigureVerdict
from resrepro.catalog import ConfigError
from resrepro.experiments import load_figures, load_tables

TABLES = {"sas-t4": {"paper": "sas", "rows": [{"label": "Base"}, {"label": "SAS"}, {"label": "SAS (100)"}]},
          "rskip-t1": {"paper": "rskip", "rows": [{"label": "x + F"}]}}
FIGURES = {"sas-f3": {"paper": "sas", "checks": [{"claim": "a falls"}, {"claim": "b rises"}]}, "sas-f4": {"paper": "sas"}}


def row(table, label, verdict, n=3, n_diverged=0):
    return {"table": table, "label": label, "verdict": verdict, "n": n, "n_diverged": n_diverged}


@pytest.mark.parametrize("verdicts, expected", [
    (["supported", "supported"], "supported"),
    (["contradicted"], "contradicted"),
    (["supported", "contradicted"], "inconclusive"),
    (["supported", "inconclusive"], "inconclusive"),
    (["diverged", "diverged"], "diverged"),
    (["diverged", "supported"], "inconclusive"),
    (["no result"], "no result"),
    ([], "not run"),
    (["baseline", "no claim", ""], "not run"),  # baselines and rows without a claim are not evidence
    (["supported", "baseline", "no claim"], "supported"),
])
def test_a_claims_verdict_is_unanimous_over_the_evidence_that_ran(verdicts, expected):
    assert claim_verdict(verdicts) == expected


@pytest.mark.parametrize("text, expected", [
    ("sas-t4", Reference("table", "sas-t4")),
    ("sas-t4: SAS (100)", Reference("table", "sas-t4", label="SAS (100)")),  # a label may hold brackets; split at the first colon
    ("sas-f3", Reference("figure", "sas-f3")),
    ("sas-f3: check 2", Reference("figure", "sas-f3", number=2)),
])
def test_references_resolve_to_a_table_row_figure_or_check(text, expected):
    assert parse_reference(text, TABLES, FIGURES, "here") == expected
    assert str(expected) == text


@pytest.mark.parametrize("text, message", [
    ("sas-t9", "neither a table nor a figure"),
    ("sas-t4: SAS+", r"has no row 'SAS\+'"),
    ("sas-f3: check 3", "it has 2"),
    ("sas-f3: check 0", "it has 2"),
    ("sas-f3: a falls", "is not a check"),
    ("sas-f3: chek 1", "is not a check"),  # the word itself, not only the number
    ("sas-f4: check 1", "it has 0"),  # a figure without checks
])
def test_a_reference_that_does_not_resolve_is_a_config_error(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_reference(text, TABLES, FIGURES, "here")


def write(tmp_path, text) -> Path:
    path = tmp_path / "claims.yaml"
    path.write_text(text)
    return path


def test_load_claims_checks_keys_papers_and_ownership(tmp_path):
    good = load_claims(write(tmp_path, 'sas:\n  - {claim: "SAS helps", source: "Abstract", evidence: ["sas-t4: SAS", sas-f3]}\n'), TABLES, FIGURES)
    assert good == {"sas": [{"claim": "SAS helps", "source": "Abstract",
                             "evidence": [Reference("table", "sas-t4", label="SAS"), Reference("figure", "sas-f3")]}]}
    for text, message in [
        ('zzz:\n  - {claim: c, source: s, evidence: [sas-t4]}\n', "unknown paper 'zzz'"),
        ('sas:\n  - {claim: c, evidence: [sas-t4]}\n', "missing key 'source'"),
        ('sas:\n  - {claim: c, source: s, evidence: [sas-t4], why: w}\n', "unknown key 'why'"),
        ('sas:\n  - {claim: c, source: s, evidence: []}\n', "needs evidence"),
        ('sas:\n  - {claim: c, source: s, evidence: [rskip-t1]}\n', "of paper 'rskip', not 'sas'"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_claims(write(tmp_path, text), TABLES, FIGURES)
    # an error names the file and the claim (paper, index)
    with pytest.raises(ConfigError, match=r"claims\.yaml: sas\[1\]: missing key 'source'"):
        load_claims(write(tmp_path, 'sas:\n  - {claim: c, source: s, evidence: [sas-t4]}\n  - {claim: c, evidence: [sas-t4]}\n'), TABLES, FIGURES)
    with pytest.raises(ConfigError, match=r"claims\.yaml: sas\[0\]\.evidence: table sas-t4 has no row"):
        load_claims(write(tmp_path, 'sas:\n  - {claim: c, source: s, evidence: ["sas-t4: none"]}\n'), TABLES, FIGURES)


@pytest.mark.config
def test_the_projects_claims_resolve_against_its_tables_and_figures():
    tables, figures = load_tables("config/tables"), load_figures("config/figures")
    loaded = load_claims("config/claims.yaml", tables, figures)
    assert list(loaded) == ["sas", "rskip", "noise", "iter"]
    assert all(len(c) >= 3 for c in loaded.values())
    # every table with a verdict of each paper is evidence of some claim (the tables beyond the papers make none)
    cited = {ref.id for paper in loaded.values() for c in paper for ref in c["evidence"]}
    with_verdicts = {t for t, table in tables.items() if table["paper"] != "beyond"
                     and (table.get("baseline") or any("baseline" in r for r in table["rows"]))}
    assert with_verdicts - cited == set()
    assert {f for f, figure in figures.items() if figure.get("checks")} - cited == set()  # and every figure with a verdict


def test_summary_reads_rows_and_checks_and_says_what_did_not_run():
    rows = pd.DataFrame([row("sas-t4", "Base", "baseline"), row("sas-t4", "SAS", "supported"),
                         row("sas-t4", "SAS (100)", "no result", n=0, n_diverged=3)])
    checks = {"sas-f3": [FigureVerdict("a falls", "supported", 3, 3, ""), FigureVerdict("b rises", "contradicted", 0, 3, "")]}
    paper = {"sas": [
        {"claim": "all", "source": "s", "evidence": [Reference("table", "sas-t4"), Reference("figure", "sas-f3", number=1)]},
        {"claim": "one row", "source": "s", "evidence": [Reference("table", "sas-t4", label="SAS")]},
        {"claim": "diverges", "source": "s", "evidence": [Reference("table", "sas-t4", label="SAS (100)")]},
        {"claim": "second check", "source": "s", "evidence": [Reference("figure", "sas-f3", number=2)]},
        {"claim": "elsewhere", "source": "s", "evidence": [Reference("table", "sas-t6"), Reference("figure", "sas-f4")]},
        {"claim": "whole figure", "source": "Fig. 3", "evidence": [Reference("figure", "sas-f3")]},
    ]}
    out = summarise(paper, rows, checks)["sas"]
    assert [c["verdict"] for c in out] == ["inconclusive", "supported", "diverged", "contradicted", "not run", "inconclusive"]
    assert (out[5]["claim"], out[5]["source"], out[5]["evidence"]) == ("whole figure", "Fig. 3", "sas-f3: 1 supported, 1 contradicted of 2 checks")
    assert out[0]["evidence"] == "sas-t4: 1 supported, 1 diverged of 2 rows; sas-f3: 1 supported of 1 check"
    assert [ref for ref, _ in out[0]["cited"]] == ["sas-t4", "sas-f3"]
    assert out[0]["cited"] == [("sas-t4", "sas-t4"), ("sas-f3", "sas-f3: check 1")]  # the summary names the row or check
    assert out[1]["cited"] == [("sas-t4", "sas-t4: SAS")]
    assert out[4]["evidence"] == "not in this run: sas-t6, sas-f4"
    partly = summarise({"sas": [{"claim": "c", "source": "s", "evidence": [Reference("table", "sas-t4", label="SAS"),
                                                                            Reference("table", "sas-t6", label="x"), Reference("table", "sas-t6")]}]},
                       rows, checks)["sas"][0]
    assert partly["verdict"] == "supported"  # on what ran; the line says what did not
    assert partly["evidence"] == "sas-t4: 1 supported of 1 row; not in this run: sas-t6"


def test_the_summary_says_how_many_of_a_claims_rows_rest_on_nets_that_did_not_learn():
    rows = pd.DataFrame([row("noise-t2", "Res", "baseline"), row("noise-t2", "Pln", "supported"), row("noise-t2", "Pln 2", "supported"),
                         row("noise-t2", "Pln 3", "supported")]).assign(unlearned=[True, True, True, False])
    claim = {"claim": "c", "source": "s", "evidence": [Reference("table", "noise-t2")]}
    out = summarise({"noise": [claim]}, rows, {})["noise"][0]
    assert out["evidence"] == ("noise-t2: 3 supported of 3 rows; 2 of these rows on nets that did not learn at this scale "
                               "(see their notes)")  # the baseline is not evidence
    one = summarise({"noise": [{**claim, "evidence": [Reference("table", "noise-t2", label="Pln 3")]}]}, rows, {})["noise"][0]
    assert one["evidence"] == "noise-t2: 1 supported of 1 row"


def test_evidence_line_counts_per_source_in_order():
    pieces = [("t1", "row", "supported"), ("f2", "check", "inconclusive"), ("t1", "row", "supported"), ("t1", "row", "contradicted")]
    assert evidence_line(pieces, []) == "t1: 2 supported, 1 contradicted of 3 rows; f2: 1 inconclusive of 1 check"
    assert evidence_line([], ["t3", "f4"]) == "not in this run: t3, f4"


def test_a_row_without_result_is_diverged_only_when_its_runs_diverged():
    assert claims.row_verdict(pd.Series(row("t", "r", "no result", n=0, n_diverged=2))) == "diverged"
    assert claims.row_verdict(pd.Series(row("t", "r", "no result", n=0, n_diverged=1))) == "diverged"
    assert claims.row_verdict(pd.Series(row("t", "r", "no result", n=0, n_diverged=0))) == "no result"
    assert claims.row_verdict(pd.Series(row("t", "r", "inconclusive", n=1, n_diverged=2))) == "inconclusive"
    assert claims.row_verdict(pd.Series(row("t", "r", float("nan")))) == ""  # rows.csv: an empty verdict reads back as NaN


def test_a_claim_citing_a_row_that_is_not_there_fails_the_plan_before_any_job(tmp_path):
    from test_experiments import snakefile_config

    from resrepro import experiments

    path = write(tmp_path, 'sas:\n  - {claim: c, source: s, evidence: ["sas-t4: CIFAR-10 Proposal"]}\n')
    with pytest.raises(ConfigError, match="table sas-t4 has no row 'CIFAR-10 Proposal'"):
        experiments.make_plan(snakefile_config("tables=[sas-t4]", f"claims={path}"))
