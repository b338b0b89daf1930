"""Verdicts and the tidy tables, on hand-made metrics files (diverged and missing runs included)."""

import json
import math

import pandas as pd
import pytest
from scipy import stats as scipy_stats
from fake_runs import TABLES

from resrepro import files
from resrepro.analysis import stats
from resrepro.analysis.aggregate import aggregate, paper_model
from resrepro.analysis.parameters import by_row, parameter_counts
from resrepro.experiments import load_tables
from resrepro.specs import TableRow


def counted(plan_rows: list[dict]) -> dict:
    """The parameters job's counts of these rows (analysis/parameters.py), as the aggregate takes them."""
    return by_row(parameter_counts(plan_rows, load_tables(TABLES)))


def test_welch_verdicts():
    # paper: error 6.02 vs baseline 6.31 -> the row is claimed better (lower error)
    v = stats.compare([5.0, 5.1, 4.9, 5.05], [6.0, 6.1, 5.9, 6.05], 6.02, 6.31, higher_is_better=False)
    assert v.verdict == "supported" and v.p_value < 0.05 and v.difference == pytest.approx(-1.0)
    assert v.p_value == pytest.approx(scipy_stats.ttest_ind([5.0, 5.1, 4.9, 5.05], [6.0, 6.1, 5.9, 6.05], equal_var=False).pvalue)
    v = stats.compare([7.0, 7.1, 6.9], [6.0, 6.1, 5.9], 6.02, 6.31, higher_is_better=False)
    assert v.verdict == "contradicted"
    v = stats.compare([6.0, 7.0], [6.1, 6.9], 6.02, 6.31, higher_is_better=False)
    assert v.verdict == "inconclusive" and v.resolvable > abs(v.difference)
    assert stats.compare([6.0], [6.1, 6.2], 6.02, 6.31, False).verdict == "inconclusive"
    # accuracy: higher is better; 94.05 vs 93.66 claimed better
    assert stats.compare([95.0, 95.2, 95.1], [94.0, 94.1, 93.9], 94.05, 93.66, True).verdict == "supported"
    assert stats.compare([95.0, 95.2], [94.0, 94.1], 94.0, 94.0, True).verdict == "no claim"


def test_resolvable_effect_shrinks_with_more_seeds():
    few = stats.compare([1.0, 2.0, 1.5], [1.2, 2.2, 1.7], 1.0, 2.0, False)
    many = stats.compare([1.0, 2.0, 1.5] * 4, [1.2, 2.2, 1.7] * 4, 1.0, 2.0, False)
    assert many.resolvable < few.resolvable


def _write_run(results, run, error=None, diverged=False):
    """A finished run whose best epoch (1) is 0.5 better than its final one, with a training log."""
    from fake_runs import write_metrics

    write_metrics(results, run, None if diverged else error, best=None if diverged else (error - 0.5, 1), train_log=True)


def test_aggregate_rows_runs_and_curves(tmp_path):
    base = "classification/digits/preact_resnet8/default"
    plan = [
        {"table": "sas-t7", "row": 0, "label": "x + F (Baseline)", "baseline": "x + F (Baseline)", "runs": [f"{base}/add/seed0", f"{base}/add/seed1"]},
        {"table": "sas-t7", "row": 1, "label": "SAS with BN", "baseline": "x + F (Baseline)", "runs": [f"{base}/sas-normbn/seed0", f"{base}/sas-normbn/seed1"]},
        {"table": "sas-t7", "row": 2, "label": "SAS with LN", "baseline": "x + F (Baseline)", "runs": [f"{base}/sas/seed0", f"{base}/sas/seed1"]},
    ]
    _write_run(tmp_path, f"{base}/add/seed0", 4.0)
    _write_run(tmp_path, f"{base}/add/seed1", 6.0)
    _write_run(tmp_path, f"{base}/sas-normbn/seed0", diverged=True)
    _write_run(tmp_path, f"{base}/sas-normbn/seed1", 3.0)
    _write_run(tmp_path, f"{base}/sas/seed0", 2.0)  # seed1 missing (a failed job under --keep-going)
    out = aggregate(plan, tmp_path, TABLES, "final")
    rows = out["rows"].set_index("label")
    assert rows.loc["x + F (Baseline)", "mean"] == pytest.approx(95.0)  # accuracy = 100 - error
    assert rows.loc["x + F (Baseline)", "std"] == pytest.approx(2 ** 0.5)
    assert rows.loc["x + F (Baseline)", "paper"] == 93.66
    assert rows.loc["x + F (Baseline)", "delta"] == pytest.approx(95.0 - 93.66)
    assert rows.loc["x + F (Baseline)", "verdict"] == "baseline"
    bn = rows.loc["SAS with BN"]
    assert (bn["n"], bn["n_diverged"], bn["mean"]) == (1, 1, 97.0)
    assert json.loads(bn["values"]) == ["diverged", 97.0]
    assert bn["verdict"] == "inconclusive"
    ln = rows.loc["SAS with LN"]
    assert (ln["n"], ln["n_unfinished"]) == (1, 1) and json.loads(ln["values"]) == [98.0, "missing"]
    runs = out["runs"].set_index("run")
    assert runs.loc[f"{base}/sas-normbn/seed0", "status"] == "diverged"
    assert runs.loc[f"{base}/sas/seed1", "status"] == "missing"
    assert list(out["curves"].columns[:2]) == ["run", "epoch"] and list(out["curves"].index) == list(range(5 * 2))
    assert set(out["curves"]["run"]) == {f"{base}/add/seed0", f"{base}/add/seed1", f"{base}/sas-normbn/seed0", f"{base}/sas-normbn/seed1", f"{base}/sas/seed0"}
    best = aggregate(plan, tmp_path, TABLES, "best")["rows"].set_index("label")
    assert best.loc["x + F (Baseline)", "mean"] == pytest.approx(95.5)


def test_rows_named_as_baseline_by_others_are_marked_baseline(tmp_path):
    """sas-t4 has no table-wide baseline: each proposal row names its own."""
    base = "classification/digits/preact_resnet8/default"
    plan = [
        {"table": "sas-t4", "row": 0, "label": "CIFAR-10 Baseline", "baseline": None, "runs": [f"{base}/add/seed0"]},
        {"table": "sas-t4", "row": 1, "label": "CIFAR-10 + Proposal", "baseline": "CIFAR-10 Baseline", "runs": [f"{base}/sas/seed0"]},
    ]
    _write_run(tmp_path, f"{base}/add/seed0", 4.0)
    _write_run(tmp_path, f"{base}/sas/seed0", 3.0)
    rows = aggregate(plan, tmp_path, TABLES, "final")["rows"].set_index("label")
    assert rows.loc["CIFAR-10 Baseline", "verdict"] == "baseline"
    assert rows.loc["CIFAR-10 + Proposal", "verdict"] == "inconclusive"


def test_a_row_on_its_baselines_own_runs_makes_no_claim(tmp_path):
    """rskip-t1's "Baseline (He et al. 2016b)" is 1xSkip's model, so both rows are the same runs (as
    are two paper depths one mini depth stands for): no p-value, no seeds needed, not evidence."""
    base = "classification/digits/preact_resnet8/default"
    adds, xskips = [f"{base}/add/seed{k}" for k in range(2)], [f"{base}/xskip-lam2/seed{k}" for k in range(2)]
    plan = [
        {"table": "rskip-t1", "row": 0, "label": "Baseline (He et al. 2016b)", "baseline": "1xSkip", "runs": adds[::-1]},
        {"table": "rskip-t1", "row": 1, "label": "1xSkip", "baseline": "1xSkip", "runs": adds},
        {"table": "rskip-t1", "row": 2, "label": "2xSkip", "baseline": "1xSkip", "runs": xskips},
    ]
    for run, error in zip(adds + xskips, (4.0, 6.0, 9.0, 11.0)):
        _write_run(tmp_path, run, error)
    rows = aggregate(plan, tmp_path, TABLES, "final")["rows"].set_index("label")
    same = rows.loc["Baseline (He et al. 2016b)"]
    assert same["verdict"] == "no claim" and "same runs as its baseline" in same["reason"]
    assert all(pd.isna(same[k]) for k in ("p_value", "difference", "resolvable", "seeds_needed"))
    assert rows.loc["1xSkip", "verdict"] == "baseline"
    other = rows.loc["2xSkip"]
    assert other["verdict"] in ("supported", "contradicted", "inconclusive") and other["difference"] == pytest.approx(5.0)


def test_runs_without_a_result_say_why(tmp_path):
    """failed (failed.json), incomplete (checkpoints, no metrics), missing (nothing): each its own
    status and reason in runs.csv, counted as unfinished in its row."""
    base = "classification/digits/preact_resnet8/default"
    runs = [f"{base}/add/seed{k}" for k in range(4)]
    plan = [{"table": "sas-t7", "row": 0, "label": "x + F (Baseline)", "baseline": "x + F (Baseline)", "runs": runs}]
    _write_run(tmp_path, runs[0], 4.0)
    files.write_json(tmp_path / runs[1] / "failed.json", {"error": "RuntimeError: CUDA out of memory", "command": "train"})
    files.write_text(tmp_path / runs[2] / "checkpoints" / "last.pt", "x")
    out = aggregate(plan, tmp_path, TABLES, "final")
    table = out["runs"].set_index("run")
    assert list(table["status"]) == ["ok", "failed", "incomplete", "missing"]
    assert table.loc[runs[1], "error"] == "RuntimeError: CUDA out of memory"
    assert "killed, or still running" in table.loc[runs[2], "error"] and table.loc[runs[3], "error"] == "never ran"
    row = out["rows"].iloc[0]
    assert (row["n"], row["n_unfinished"], row["n_runs"]) == (1, 3, 4)
    assert json.loads(row["values"]) == [96.0, "failed", "incomplete", "missing"]
    plan.append({"table": "sas-t7", "row": 2, "label": "SAS with LN", "baseline": "x + F (Baseline)", "runs": [f"{base}/sas/seed0"]})
    no_result = aggregate(plan, tmp_path, TABLES, "final")["rows"].iloc[1]
    assert (no_result["verdict"], no_result["reason"], no_result["n"]) == ("no result", "no finished seed in this row or its baseline", 0)
    assert math.isnan(no_result["mean"]) and math.isnan(no_result["std"]) and math.isnan(no_result["delta"])  # empty cells
    assert math.isnan(out["rows"].iloc[0]["std"])  # one finished seed: no spread


def test_translation_rows_bleu_bootstrap_and_paper_size_parameters(tmp_path):
    """rskip-t5 at 3 seeds: tokenized BLEU is the row's number, sacreBLEU its own column, each
    seed's bootstrap p is sacreBLEU's paired test of the row against the baseline's same seed,
    and the parameter column counts the paper-size model (2rSkip+LN: one LayerNorm, 2 x 512
    parameters, per sublayer: 30 in 6+6 layers, 10 in 2+2)."""
    from fake_runs import plan_for, write_translation_run

    from resrepro.evaluate.bleu import paired_bootstrap

    plan = plan_for(["rskip-t5"])
    refs = [f"the cat number {i} sat on the mat today" for i in range(30)]
    good = list(refs)
    bad = [r.replace("sat on", "ate") if i % 2 else r for i, r in enumerate(refs)]
    hyps = {"xskip_ln": bad, "rskip_ln-lam2": good}
    bleus = {"xskip_ln": [30.0, 31.0, 32.5], "rskip_ln-lam2": [34.0, 34.5, 35.5]}
    for path, run in plan.runs.items():
        v = run.variant_id
        write_translation_run(tmp_path, path, bleus[v][run.seed], bleus[v][run.seed] - 3, hyps[v][: 20 + run.seed], refs[: 20 + run.seed])
    rows = aggregate(plan.rows, tmp_path, TABLES, "final", counted(plan.rows))["rows"].set_index("label")
    base, prop = rows.loc["1xSkip+LN, 6 blocks"], rows.loc["2rSkip+LN, 6 blocks"]
    assert base["mean"] == pytest.approx(93.5 / 3) and prop["mean"] == pytest.approx(104 / 3)
    assert base["sacrebleu"] == pytest.approx(93.5 / 3 - 3) and prop["sacrebleu"] == pytest.approx(104 / 3 - 3)
    assert prop["verdict"] == "supported" and prop["delta"] == pytest.approx(104 / 3 - 31.45)
    expected = [paired_bootstrap(bad[: 20 + k], good[: 20 + k], refs[: 20 + k])["p_value"] for k in range(3)]
    assert json.loads(prop["bootstrap_p"]) == expected and max(expected) < 0.05
    assert base["verdict"] == "baseline" and not isinstance(base["bootstrap_p"], str)  # no test against itself
    # the extra LN of each of the 6 + 6 encoder and 6 x 3 decoder sublayers: 30 x (gain + bias) x 512
    assert prop["parameters_at_paper_size"] - base["parameters_at_paper_size"] == 30 * 2 * 512
    two = rows.loc["2rSkip+LN, 2 blocks"]["parameters_at_paper_size"] - rows.loc["1xSkip+LN, 2 blocks"]["parameters_at_paper_size"]
    assert two == 10 * 2 * 512
    assert base["parameters_at_paper_size"] == BASE_PARAMETERS_32K and base["parameters_vocabulary"] == 2**15
    assert pd.isna(base["paper_parameters"])  # the paper prints counts for its EN-DE rows only


# Transformer base by hand at the 2**15 joint vocabulary, tied embeddings, bias-free attention (t2t):
# embedding 32768 x 512; encoder layer 4 x 512^2 attention + (2 x 512 x 2048 + 2048 + 512) ffn + 2 LNs
# x 1024; decoder layer 2 attentions + ffn + 3 LNs; 6 layers each.
BASE_PARAMETERS_32K = 32768 * 512 + 6 * (4 * 512**2 + 2_099_712 + 2 * 1024) + 6 * (8 * 512**2 + 2_099_712 + 3 * 1024)


def test_paper_parameters_come_from_the_table_and_ours_from_the_model():
    """rskip-t7's EN-DE rows: the paper's printed count beside ours at the pipeline's vocabulary."""
    from fake_runs import plan_for

    plan = plan_for(["rskip-t7"], seeds=1)
    rows = aggregate(plan.rows, "/nonexistent", TABLES, "final", counted(plan.rows))["rows"].set_index("label")
    de = rows.loc[["EN-DE Base", "EN-DE Base + proposal", "EN-DE Big", "EN-DE Big + proposal"]]
    assert list(de["paper_parameters"]) == [65_000_000, 65_030_000, 213_000_000, 213_060_000]
    assert list(de["parameters_at_paper_size"]) == [BASE_PARAMETERS_32K, BASE_PARAMETERS_32K + 30 * 1024, 209_838_080, 209_838_080 + 30 * 2048]
    assert rows.loc["EN-VI Big", "parameters_at_paper_size"] == 209_838_080 and rows["parameters_vocabulary"].eq(2**15).all()


def test_a_trained_translation_run_without_eval_json_is_missing(tmp_path):
    from fake_runs import plan_for

    plan = plan_for(["rskip-t5"], seeds=1)
    for path in plan.runs:
        files.write_json(tmp_path / path / "metrics.json", {"diverged": False, "wall_time_s": 1.0, "spec": {"max_updates": 9}, "provenance": {"device": "cpu", "git_commit": "abc"}})
    runs = aggregate(plan.rows, tmp_path, TABLES, "final")["runs"]
    assert set(runs["status"]) == {"missing"} and set(runs["error"]) == {"trained, not evaluated (see evaluate.log)"}


def test_bootstrap_is_skipped_where_either_seed_has_no_result(tmp_path):
    """A seed whose run diverged (or whose baseline did) has no outputs to test: None, not a crash."""
    from fake_runs import plan_for, write_translation_run

    plan = plan_for(["rskip-t5"], seeds=3)
    refs = [f"sentence {i} of the test set" for i in range(10)]
    for path, run in plan.runs.items():
        if (run.variant_id, run.seed) in {("rskip_ln-lam2", 1), ("xskip_ln", 2)}:
            files.write_json(tmp_path / path / "metrics.json", {"diverged": True, "diverged_at": {"step": 3}, "wall_time_s": 1.0, "spec": {"max_updates": 9},
                                                                "provenance": {"device": "cpu", "git_commit": "abc"}})
        else:
            write_translation_run(tmp_path, path, 30.0, 27.0, refs, refs)
    rows = aggregate(plan.rows, tmp_path, TABLES, "final")["rows"].set_index("label")
    assert json.loads(rows.loc["2rSkip+LN, 6 blocks", "bootstrap_p"]) == [1.0, None, None]


def test_bootstrap_runs_once_per_pair_of_runs_and_afresh_in_each_call(tmp_path, monkeypatch):
    """rskip-t2 and rskip-t7 compare the same mini runs (one corpus, one model): each pair is tested
    once in an aggregate call, every table gets its p-value, and a later call reads the files again."""
    from fake_runs import plan_for, write_translation_run

    from resrepro.evaluate import bleu

    plan = plan_for(["rskip-t2", "rskip-t7"], seeds=2)
    refs = [f"the cat number {i} sat on the mat today" for i in range(20)]
    bad = [r.replace("sat on", "ate") for r in refs]
    for path, run in plan.runs.items():
        write_translation_run(tmp_path, path, 30.0, 27.0, refs if run.variant_id == "xskip_ln" else bad, refs)
    calls = []
    real = bleu.paired_bootstrap
    monkeypatch.setattr(bleu, "paired_bootstrap", lambda *a, **k: calls.append(a) or real(*a, **k))
    rows = aggregate(plan.rows, tmp_path, TABLES, "final")["rows"]
    tested = rows[rows["bootstrap_p"].apply(lambda p: isinstance(p, str))]
    by_label = {(row["table"], row["label"]): row for row in plan.rows}
    pairs = {(r, b) for row in plan.rows if (row["table"], row["baseline"]) in by_label and row["baseline"] != row["label"]
             for r, b in zip(row["runs"], by_label[row["table"], row["baseline"]]["runs"])}
    assert len(calls) == len(pairs) < 2 * len(tested)  # a p-value per row and seed, a test per pair
    for label, ps in zip(tested["label"], tested["bootstrap_p"]):  # 1xSkip+LN and 1rSkip+LN are the baseline's own runs
        assert all(p == 1.0 if label in ("1xSkip+LN", "1rSkip+LN") else p < 0.05 for p in json.loads(ps))
    for path, run in plan.runs.items():  # the systems now translate alike: a new call sees it
        write_translation_run(tmp_path, path, 30.0, 27.0, refs, refs)
    again = aggregate(plan.rows, tmp_path, TABLES, "final")["rows"]
    assert len(calls) == 2 * len(pairs)
    assert all(p == 1.0 for ps in again["bootstrap_p"] if isinstance(ps, str) for p in json.loads(ps))


def test_read_run_fills_every_runs_csv_column(tmp_path):
    """runs.csv, one line per run: each status's line in full, read from the files train and
    evaluate write (a field lost or misnamed here is a blank column in the report's run list)."""
    from fake_runs import write_metrics, write_translation_run

    from resrepro.analysis.aggregate import read_run

    cls = "classification/digits/preact_resnet8/default/sas"
    write_metrics(tmp_path, f"{cls}/seed0", 4.5)
    write_metrics(tmp_path, f"{cls}/seed1", None)
    files.write_json(tmp_path / f"{cls}/seed2" / "failed.json", {"error": "CUDA out of memory"})
    files.write_text(tmp_path / f"{cls}/seed3" / "checkpoints" / "step10.pt", "")
    tr = "translation/synthetic/transformer_mini/default/xskip_ln"
    write_translation_run(tmp_path, f"{tr}/seed0", 30.5, 27.25, ["a b"], ["a b"])
    names = {"task": "classification", "dataset": "digits", "arch": "preact_resnet8", "recipe": "default", "variant_id": "sas"}
    done = {"parameters": 10, "wall_time_s": 1.0, "device": "cpu", "git_commit": "abc"}
    assert read_run(tmp_path, f"{cls}/seed0") == {"run": f"{cls}/seed0", **names, "seed": 0, "status": "ok", "epochs_completed": 2, **done, "train_length": "2 epochs",
                                                  "final_test_error": 4.5, "best_test_error": 4.5, "best_epoch": 2, "final_train_error": 2.25,
                                                  "final_train_loss": 0.045, "best_train_loss": 0.09}
    assert read_run(tmp_path, f"{cls}/seed1") == {"run": f"{cls}/seed1", **names, "seed": 1, "status": "diverged", "epochs_completed": 2, **done, "train_length": "2 epochs",
                                                  "diverged_step": 3}
    assert read_run(tmp_path, f"{cls}/seed2") == {"run": f"{cls}/seed2", **names, "seed": 2, "status": "failed", "error": "CUDA out of memory"}
    assert read_run(tmp_path, f"{cls}/seed3") == {"run": f"{cls}/seed3", **names, "seed": 3, "status": "incomplete",
                                                  "error": "checkpoints but no result: killed, or still running (see train.log)"}
    assert read_run(tmp_path, f"{cls}/seed4") == {"run": f"{cls}/seed4", **names, "seed": 4, "status": "missing", "error": "never ran"}
    assert read_run(tmp_path, f"{tr}/seed0") == {"run": f"{tr}/seed0", "task": "translation", "dataset": "synthetic", "arch": "transformer_mini", "recipe": "default",
                                                 "variant_id": "xskip_ln", "seed": 0, "status": "ok", "epochs_completed": None, **done, "wall_time_s": 2.0, "train_length": "20 updates",
                                                 "bleu": 30.5, "bleu_tokenization": "synthetic: the synthetic corpus's own tokens", "sacrebleu": 27.25, "sacrebleu_signature": "sig", "test_sentences": 1, "test_split_sentences": 1,
                                                 "dev_loss_averaged": 1.25, "dev_loss_last": 1.27}


def test_a_translation_row_says_when_averaging_made_the_dev_loss_worse():
    """Two seeds averaged 1.5 and 1.6 (mean 1.55) against 1.2 and 1.3 at their last checkpoints
    (1.25): the note gives both; averaging that helped, or runs without the losses, say nothing."""
    from resrepro.analysis.aggregate import averaging_note

    worse = pd.DataFrame({"dev_loss_averaged": [1.5, 1.6], "dev_loss_last": [1.2, 1.3]})
    assert averaging_note(worse) == ("Averaging made the dev loss worse: 1.550 for the averaged checkpoints against 1.250 at the last "
                                     "one (mean over 2 seeds); the BLEU is the averaged model's.")
    assert averaging_note(worse.iloc[:1]).endswith("(mean over 1 seed); the BLEU is the averaged model's.")
    assert averaging_note(pd.DataFrame({"dev_loss_averaged": [1.2], "dev_loss_last": [1.25]})) == ""
    assert averaging_note(pd.DataFrame({"dev_loss_averaged": [1.25], "dev_loss_last": [1.25]})) == ""  # no worse
    assert averaging_note(pd.DataFrame({"dev_loss_averaged": [None], "dev_loss_last": [None]}, dtype=object)) == ""


def test_runs_columns_rows_cells_and_per_seed_values(tmp_path):
    """runs.csv has RUN_COLUMNS in order even where no run fills one (no translation run here);
    each row names the cell it ran; per-seed values are shown to 2 decimals."""
    from fake_runs import plan_for, write_metrics

    from resrepro.analysis.aggregate import RUN_COLUMNS

    plan = plan_for(["sas-t7"], seeds=1)
    for path in plan.runs:
        write_metrics(tmp_path, path, 4.5678)
    out = aggregate(plan.rows, tmp_path, TABLES, "final")
    assert list(out["runs"].columns) == RUN_COLUMNS
    assert out["curves"].empty and list(out["curves"].columns) == ["run", "epoch"]  # no train_log.csv written
    row = out["rows"].iloc[1]
    first = plan.runs[plan.rows[1]["runs"][0]]
    assert (row["dataset"], row["arch"], row["recipe"], row["variant_id"]) == (first.dataset, first.arch_dir, "default", first.variant_id)
    assert json.loads(row["values"]) == [95.43]  # 100 - 4.5678, rounded for display; the mean is not
    assert row["mean"] == pytest.approx(100 - 4.5678)


def test_rows_name_their_table_row_and_the_papers_cell(tmp_path):
    """rows.csv's identity columns, which the report's tables are built from: a translation row
    (a model size) and a classification row (a depth) whose table gives no formula."""
    import yaml
    from fake_runs import plan_for, write_metrics, write_translation_run

    plan = plan_for(["rskip-t5", "sas-t7"], seeds=1)
    for path, run in plan.runs.items():
        if run.task == "translation":
            write_translation_run(tmp_path / "results", path, 30.0, 27.0, ["a b c d"], ["a b c d"])
        else:
            write_metrics(tmp_path / "results", path, 5.0)
    tables = yaml.safe_load(open(f"{TABLES}/sas.yaml"))
    del tables["sas-t7"]["rows"][1]["formula"]
    files.write_text(tmp_path / "sas.yaml", yaml.safe_dump(tables, sort_keys=False))
    rows = aggregate(plan.rows, tmp_path / "results", [f"{TABLES}/rskip.yaml", tmp_path / "sas.yaml"], "best")["rows"]
    rows = rows.set_index(["table", "row"], drop=False)
    identity = ["table", "row", "label", "formula", "paper_dataset", "paper_arch", "metric", "higher_is_better", "epoch_basis",
                "paper", "n", "n_runs", "baseline"]
    assert list(rows.loc[("rskip-t5", 1), identity]) == ["rskip-t5", 1, "2rSkip+LN, 6 blocks", "LN(x + LN(x + F))", "iwslt15_en_vi", "base",
                                                         "bleu", True, "best", 31.45, 1, 1, "1xSkip+LN, 6 blocks"]
    sas = rows.loc[("sas-t7", 1)]
    assert list(sas[identity]) == ["sas-t7", 1, "SAS with BN", "", "cifar10", 110, "test_accuracy", True, "best", sas["paper"], 1, 1,
                                   "x + F (Baseline)"]


def test_a_row_without_a_baseline_has_no_verdict(tmp_path):
    """A row that names no baseline and that no row names as its own: an empty verdict and reason,
    not "baseline"."""
    import yaml

    table = {"t": {"paper": "sas", "caption": "c", "source": "s", "task": "classification", "metric": "test_error", "rows": [
        {"label": "A", "dataset": "cifar10", "depth": 110, "variant": "add", "paper": 6.0},
        {"label": "B", "dataset": "cifar10", "depth": 110, "variant": "sas", "paper": 5.0, "baseline": "A"},
        {"label": "C", "dataset": "cifar10", "depth": 110, "variant": "sas", "paper": 5.5}]}}
    files.write_text(tmp_path / "t.yaml", yaml.safe_dump(table))
    base = "classification/digits/preact_resnet8/default"
    plan = [{"table": "t", "row": i, "label": label, "baseline": baseline, "runs": [f"{base}/{v}/seed0"]}
            for i, (label, baseline, v) in enumerate([("A", None, "add"), ("B", "A", "sas"), ("C", None, "sas")])]
    _write_run(tmp_path / "results", f"{base}/add/seed0", 4.0)
    _write_run(tmp_path / "results", f"{base}/sas/seed0", 3.0)
    rows = aggregate(plan, tmp_path / "results", [tmp_path / "t.yaml"], "final")["rows"].set_index("label")
    assert list(rows["verdict"]) == ["baseline", "inconclusive", ""]
    assert list(rows["reason"]) == ["", "needs at least 2 finished seeds on each side", ""]


def test_train_errors_and_parameter_counts_beside_the_papers(tmp_path):
    """iter-t1 (paper 003 Table 1): the last epoch's training error, mean over seeds, beside the
    paper's; our parameter count at paper size beside the paper's. Tables without them have none."""
    from fake_runs import plan_for, write_metrics

    plan = plan_for(["iter-t1", "sas-t7"], seeds=2)
    for path, run in plan.runs.items():  # shared nets train worse: 4 and 5 against 2 and 3
        write_metrics(tmp_path, path, 10.0 + run.seed, train_error=(4.0 if run.model.startswith("shared") else 2.0) + run.seed)
    rows = aggregate(plan.rows, tmp_path, TABLES, "final", counted(plan.rows))["rows"].set_index("label")
    ubn, r38 = rows.loc["ResNet-110-UBN, CIFAR-10"], rows.loc["ResNet-38, CIFAR-100"]
    assert (ubn["train_error"], ubn["paper_train_error"]) == (4.5, 0.63)
    assert (r38["train_error"], r38["paper_train_error"]) == (2.5, 10.04)
    # the same net with a 100-class head has 64 x 90 + 90 more weights, as the paper's ranges say
    c10, c100 = rows.loc["ResNet-32, CIFAR-10"], rows.loc["ResNet-32, CIFAR-100"]
    assert c100["parameters_at_paper_size"] - c10["parameters_at_paper_size"] == 64 * 90 + 90
    assert (c10["paper_parameters"], c100["paper_parameters"]) == (467_000, 473_000)
    t1 = rows[rows["table"] == "iter-t1"]
    assert len(t1) == 14 and t1["parameters_at_paper_size"].gt(0).all()
    sas = rows[rows["table"] == "sas-t7"]
    assert sas["train_error"].isna().all() and sas["parameters_at_paper_size"].isna().all()


@pytest.mark.config
@pytest.mark.parametrize("scale", ["paper", "gpu-day", "mini"])
def test_the_shared_nets_have_the_papers_parameter_counts(scale):
    """Our paper-size nets, as each scale's recipe builds them (paper 003's init: every conv with a
    bias), against paper 003 Table 1's printed counts, which are ours cut to whole thousands: all
    14 rows exactly, the shared UBN nets as the plain ResNets."""
    from fake_runs import config_for

    from resrepro.analysis.parameters import parameters_at_paper_size
    from resrepro.experiments import make_plan

    table = load_tables("config/tables")["iter-t1"]
    plan = make_plan(config_for(["iter-t1"], 1, scale=scale, config_dir="config"))
    for plan_row in plan.rows:
        row = table["rows"][plan_row["row"]]
        ours = parameters_at_paper_size(TableRow.from_dict(row), "classification", plan_row["model_keys"])
        assert ours // 1000 * 1000 == row["paper_parameters"], (row["label"], ours)


def test_a_row_may_have_its_own_metric_or_a_measured_quantity(tmp_path):
    """noise-t5 (paper 002, SM Table 5) prints each net's training risk and test accuracy: its risk
    rows read weight_stats' risk on the final snapshot (Table 1's L), its accuracy rows the run's
    metric, each against the residual net of its depth. Diagonal nets with the higher risk and
    lower accuracy, as the paper's: both verdicts supported; one measure job and one training a net."""
    from fake_runs import plan_for, write_metrics

    plan = plan_for(["noise-t5"], seeds=3)
    for path, run in plan.runs.items():  # residual: risk 0.05 and error 10; diagonal: 0.2 and 20 (+ a seed's jitter)
        residual = run.model == "simple_net"
        write_metrics(tmp_path, path, (10.0 if residual else 20.0) + run.seed, train_loss=9.0)
        risk = (0.05 if residual else 0.2) + run.seed / 1000
        files.write_text(tmp_path / path / "measure" / "weight_stats.csv",
                         pd.DataFrame([{"quantity": "risk", "value": v, "epoch": e} for e, v in ((0, 2.3), (4, risk))]).to_csv(index=False))
    rows = aggregate(plan.rows, tmp_path, TABLES, "final")["rows"].set_index("label")
    risk, accuracy = rows.loc["Diagonal-20, risk"], rows.loc["Diagonal-20, accuracy"]
    assert (risk["metric"], risk["at"], risk["paper"], risk["baseline"]) == ("risk", "final", 0.9385, "ResNet-20, risk")
    assert risk["mean"] == pytest.approx(0.201) and json.loads(risk["values"]) == [0.2, 0.201, 0.202]
    assert risk["difference"] == pytest.approx(0.15) and risk["verdict"] == "supported"
    assert (accuracy["metric"], accuracy["higher_is_better"], accuracy["mean"], accuracy["verdict"]) == ("test_accuracy", True, 79.0, "supported")
    assert rows.loc["ResNet-44, risk", "verdict"] == "baseline"
    runs_of = {row["label"]: row["runs"] for row in plan.rows}
    assert runs_of["Diagonal-20, risk"] == runs_of["Diagonal-20, accuracy"]  # two rows a net, one training
    assert {row["measurement"] for row in plan.rows if row["label"].endswith("risk")} == {"weight_stats"}


def test_a_loss_row_reads_the_epoch_basis_training_loss_and_lower_is_better():
    """A row with `metric: train_loss` (no paper table has one now; a user's may) reads the final
    or the best epoch's loss, and a smaller loss is the better."""
    from resrepro.analysis.aggregate import seed_values
    from resrepro.experiments import METRICS

    runs = pd.DataFrame({"run": ["a", "b"], "status": ["ok", "diverged"], "final_train_loss": [0.3, None], "best_train_loss": [0.6, None],
                         "final_test_error": [10.0, None], "best_test_error": [9.0, None]}).set_index("run", drop=False)
    assert seed_values(runs, ["a", "b"], "train_loss", "final") == [0.3, None]
    assert seed_values(runs, ["a"], "train_loss", "best") == [0.6]
    assert seed_values(runs, ["a"], "test_accuracy", "best") == [91.0]
    assert METRICS["train_loss"] is False and METRICS["test_accuracy"] is True


def test_table_1s_loss_is_the_measured_training_risk():
    """SM Table 1's L is the training risk (its 0.07227 is Table 4's risk after training): noise-t1's
    loss rows read weight_stats' risk on the final snapshot, the job Table 4's rows read."""
    from fake_runs import plan_for

    plan = plan_for(["noise-t1", "noise-t4"], seeds=2)
    t1 = {row["label"]: row for row in plan.rows if row["table"] == "noise-t1"}
    t4 = {row["label"]: row for row in plan.rows if row["table"] == "noise-t4"}
    assert t1["PlnNet-20, risk"]["measurement"] == "weight_stats" and t1["PlnNet-20, risk"]["runs"] == t4["PlnNet-20 after: risk"]["runs"]
    assert t1["PlnNet-20, risk"]["settings"] == t4["PlnNet-20 after: risk"]["settings"]
    from resrepro.experiments import load_tables

    table = load_tables(TABLES)["noise-t1"]
    assert {(r.get("quantity"), r.get("at")) for r in table["rows"] if r["label"].endswith("risk")} == {("risk", "final")}


def test_same_up_to_the_papers_discrepancy_is_judged_seed_by_seed():
    """compare_same by hand: the paper's 0.04132 against 0.04287 allows 0.00155 a seed."""
    same = stats.compare_same([0.050, 0.061], [0.051, 0.060], 0.04132, 0.04287)
    assert (same.verdict, same.difference, same.p_value) == ("supported", pytest.approx(0.0), None)
    assert "largest difference of a seed is 0.001" in same.reason
    apart = stats.compare_same([0.050, 0.064], [0.051, 0.060], 0.04132, 0.04287)
    assert apart.verdict == "contradicted" and "a seed differs by 0.004" in apart.reason and apart.difference == pytest.approx(0.0015)
    # seeds pair by position: the same values in another order would be far apart
    assert stats.compare_same([0.061, 0.050], [0.051, 0.060], 0.04132, 0.04287).verdict == "contradicted"
    assert stats.compare_same([0.0502, None], [0.0500, 0.070], 0.04132, 0.04287).verdict == "supported"  # the pair with a result
    none = stats.compare_same([None], [0.05], 0.04132, 0.04287)
    assert (none.verdict, none.reason) == ("inconclusive", "needs a seed with a result in both rows")
    assert stats.compare_same([0.05], [0.05], 1.0, 1.0).verdict == "supported"  # no discrepancy allowed, none found
    assert stats.compare_same([0.0500001], [0.05], 1.0, 1.0).verdict == "contradicted"


def test_noise_t2s_equivalent_plain_nets_are_judged_the_same_as_their_residual_seeds(tmp_path):
    """noise-t2: plain nets trained equivalently end where the residual net of their seed does."""
    from fake_runs import plan_for, write_metrics

    plan = plan_for(["noise-t2"], seeds=2)
    for path, run in plan.runs.items():  # every seed its own value; plain = residual + 1e-12
        write_metrics(tmp_path, path, 10.0 + run.seed)
        risk = 0.05 + run.seed / 100 + (1e-12 if run.variant == "plain" else 0)
        files.write_text(tmp_path / path / "measure" / "weight_stats.csv", f"quantity,value,epoch\nrisk,2.3,0\nrisk,{risk!r},2\n")
    rows = aggregate(plan.rows, tmp_path, TABLES, "final")["rows"].set_index("label")
    loss = rows.loc["PlnNet-20 (equivalent), risk"]
    assert (loss["verdict"], loss["baseline"]) == ("supported", "ResNet-20, risk") and abs(loss["difference"]) < 1e-9
    assert rows.loc["PlnNet-44 (equivalent), error", "verdict"] == "supported"
    for path, run in plan.runs.items():  # seed 1's plain net 1 point off (beyond the paper's 0.1), its risk 0.01 (0.00155)
        if run.variant == "plain" and run.seed == 1:
            write_metrics(tmp_path, path, 12.0)
            files.write_text(tmp_path / path / "measure" / "weight_stats.csv", "quantity,value,epoch\nrisk,2.3,0\nrisk,0.07,2\n")
    rows = aggregate(plan.rows, tmp_path, TABLES, "final")["rows"].set_index("label")
    assert rows.loc["PlnNet-20 (equivalent), error", "verdict"] == "contradicted"
    assert rows.loc["PlnNet-20 (equivalent), risk", "verdict"] == "contradicted"


def test_figure_differences_pair_seed_with_seed_at_each_point():
    """of - minus per seed and epoch: seed 0 (3 - 1, 5 - 2) and seed 1 (4 - 6); an epoch or a seed
    that one cell lacks gives no row; abs takes the magnitude."""
    from resrepro.analysis.judgement import figure_differences

    def curve(label, seed, values):
        return [{"figure": "f", "cell": 0, "label": label, "run": f"{label}/seed{seed}", "seed": seed, "epoch": e + 1,
                 "quantity": "training loss", "value": v, "block": float("nan"), "examples": 100 if label == "a" else 50}
                for e, v in enumerate(values)]

    data = pd.DataFrame(curve("a", 0, [3.0, 5.0, 7.0]) + curve("b", 0, [1.0, 2.0]) + curve("a", 1, [4.0]) + curve("b", 1, [6.0])
                        + curve("b", 2, [1.0]))
    got = figure_differences(data, [{"label": "a - b", "of": "a", "minus": "b"}, {"label": "|b - a|", "of": "b", "minus": "a", "abs": True}])
    assert list(got.columns) == list(data.columns)
    first = got[got["label"] == "a - b"].sort_values(["seed", "epoch"])
    assert first[["seed", "epoch", "value"]].values.tolist() == [[0, 1, 2.0], [0, 2, 3.0], [1, 1, -2.0]]
    assert set(first["run"]) == {"a/seed0 - b/seed0", "a/seed1 - b/seed1"} and set(first["cell"]) == {-1} and set(first["figure"]) == {"f"}
    assert sorted(got[got["label"] == "|b - a|"]["value"]) == [2.0, 2.0, 3.0] and set(got[got["label"] == "|b - a|"]["cell"]) == {-2}
    assert figure_differences(data, []).empty
    as_read = data.assign(epoch=data["epoch"].astype(float))  # figures.csv: other figures leave the column empty
    epochs = figure_differences(as_read, [{"label": "a - b", "of": "a", "minus": "b"}])["epoch"]
    assert epochs.tolist() == [1, 2, 1] and epochs.dtype.kind == "i"  # "epoch 1", not "epoch 1.0", in the summaries


def test_captioning_rows_read_each_metric_and_say_why_spice_is_missing(tmp_path):
    """sas-t5 at 2 seeds: each row's value is its own metric of its cell's runs; without SPICE's
    jars its rows show "unavailable" per seed, no verdict, and the reason with the way to fix it."""
    from fake_runs import plan_for, write_captioning_run

    from resrepro.analysis.aggregate import read_run
    from resrepro.experiments import CAPTION_METRICS

    plan = plan_for(["sas-t5"], seeds=2)
    note = "SPICE unavailable: jars not in lib. To supply them, run get_stanford_models()"
    for path, run in plan.runs.items():
        gain = 10.0 if run.variant == "sas" else 0.0
        scores = {m: 20.0 + k + gain + run.seed for k, m in enumerate(CAPTION_METRICS)} | {"spice": None}
        write_captioning_run(tmp_path, path, scores, note)
    first = next(iter(plan.runs))
    assert read_run(tmp_path, first)["cider"] == 26.0 + plan.runs[first].seed and read_run(tmp_path, first)["features"] == "patch_grid"
    rows = aggregate(plan.rows, tmp_path, TABLES, "final")["rows"].set_index("label")
    base, prop = rows.loc["Baseline, CIDEr"], rows.loc["+ Proposal, CIDEr"]
    assert base["metric"] == "cider" and base["mean"] == 26.5 and prop["mean"] == 36.5  # cider is the 7th metric: 20 + 6
    assert json.loads(prop["values"]) == [36.0, 37.0] and prop["verdict"] == "supported"
    assert rows.loc["+ Proposal, BLEU-1", "mean"] == 30.5 and rows.loc["Baseline, ROUGE-L", "mean"] == 25.5
    spice = rows.loc["+ Proposal, SPICE"]
    assert spice["n"] == 0 and json.loads(spice["values"]) == ["unavailable", "unavailable"]
    assert spice["verdict"] == "no result" and spice["reason"] == note and note in spice["note"]
    assert rows.loc["Baseline, SPICE", "note"] == note and json.loads(rows.loc["Baseline, SPICE", "values"]) == ["unavailable"] * 2
    assert rows.loc["Baseline, CIDEr", "note"] != note  # the other metrics say nothing about SPICE


def test_caption_samples_give_each_models_first_seed_per_test_image(tmp_path):
    from fake_runs import plan_for, write_captioning_run

    from resrepro.experiments import CAPTION_METRICS

    plan = plan_for(["sas-t5"], seeds=2)
    for path in plan.runs:
        write_captioning_run(tmp_path, path, {m: 1.0 for m in CAPTION_METRICS})
    samples = aggregate(plan.rows, tmp_path, TABLES, "final")["caption_samples"]
    first = {row["label"].split(", ")[0]: row["runs"][0] for row in plan.rows}
    assert list(samples["model"]) == ["Baseline", "Baseline", "+ Proposal", "+ Proposal"]  # one model per run, not per metric row
    assert list(samples["run"]) == [first["Baseline"]] * 2 + [first["+ Proposal"]] * 2
    assert samples.iloc[1].to_dict() == {"table": "sas-t5", "model": "Baseline", "run": first["Baseline"], "image": "test1",
                                         "thumbnail": "data:image/png;base64,1", "reference": "a shape 1",
                                         "caption": f"{first['Baseline']} saw 1"}
    assert aggregate(plan_for(["rskip-t1"], seeds=1).rows, tmp_path, TABLES, "final")["caption_samples"].empty


@pytest.mark.parametrize("spec, task, length", [
    ({"epochs": 6, "max_updates": 9}, "classification", "6 epochs"),
    ({"max_updates": 600}, "translation", "600 updates"),
    ({"max_updates": 600, "scst": {"updates": 100}}, "captioning", "600 updates + 100 self-critical"),
    ({"max_updates": 600, "scst": None}, "captioning", "600 updates"),
])
def test_train_length_says_what_the_recipe_trained(spec, task, length):
    from resrepro.analysis.aggregate import train_length

    assert train_length(spec, task) == length


def test_the_papers_model_a_row_stands_for_reads_in_a_sentence():
    def row(**size):
        return TableRow(label="x", dataset="cifar10", variant="add", paper=None, **size)

    assert paper_model(row(depth=110, size="big")) == "depth 110"
    assert paper_model(row(size="big")) == "size big"
    assert paper_model(row(size="paper")) == "model"  # the captioner: "captioner_mini for the paper's model"


def test_a_row_whose_nets_did_not_learn_says_so():
    """Within 3% of ln(classes), a net predicts every class about alike (noise-t2's mini nets
    ended at 2.2974-2.3008 against ln 10 = 2.3026)."""
    from resrepro.analysis.aggregate import unlearned_note

    assert unlearned_note(pd.Series([2.2974, 2.3008]), "digits").startswith("These nets did not learn at this scale: "
                                                                            "their training loss ended at 2.299, near ln 10 = 2.303")
    assert unlearned_note(pd.Series([2.24, 2.24]), "cifar10") != ""  # 0.973 of ln 10
    assert unlearned_note(pd.Series([2.23, 2.23]), "cifar10") == ""  # 0.968 of ln 10: it started to learn
    assert unlearned_note(pd.Series([4.5]), "cifar100") != "" and unlearned_note(pd.Series([4.4]), "cifar100") == ""  # ln 100 = 4.605
    assert unlearned_note(pd.Series([0.97 * math.log(10)]), "digits") != ""  # the boundary itself is "did not learn"
    assert unlearned_note(pd.Series([0.3, float("nan")]), "digits") == ""
    assert unlearned_note(pd.Series([2.3, None], dtype=object), "digits") != ""  # a run without the value: left out
    assert unlearned_note(pd.Series([float("nan")]), "digits") == "" and unlearned_note(pd.Series([9.0]), "scenes") == ""


def test_the_aggregates_class_counts_are_the_datasets_own():
    """parameters.CLASSES stays torch-free for the workflow's parse; the data modules define the counts."""
    from resrepro.analysis.parameters import CLASSES
    from resrepro.data import cifar, digits

    assert {k: CLASSES[k] for k in cifar.CLASSES} == cifar.CLASSES
    assert CLASSES["digits"] == len(set(digits.load_digits().target))
