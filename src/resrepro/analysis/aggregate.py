"""All runs -> tidy tables with pandas: one row per run, per table row, and per epoch.

- runs.csv: one line per run (cell x seed): status, final and best test error, parameters, wall
  time, device, git commit, and for a run that did not finish, why (error).
  Status: ok; diverged (NaN/inf, a result); failed (its job raised or was terminated: failed.json);
  incomplete (checkpoints but no metrics: killed, or still running); missing (never started, or a
  translation run not yet evaluated). Only the aggregate of a partial run (`--config partial=true`)
  sees the last three: a full run waits for every result.
- rows.csv: one line per paper-table row: the paper's value, the reproduced mean, std, n and
  per-seed values, the delta to the paper, and the verdict on the paper's claim against the row's
  baseline (analysis/stats.py).
- curves.csv: the training logs of all runs, for learning curves.
Diverged runs count as diverged, never as a number: they are left out of the mean and listed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from .. import layout
from ..data.subword import VOCAB_SIZES
from ..experiments import CAPTION_METRICS, METRICS, higher_is_better, load_tables, row_metric
from ..specs import MISSING, TableRow
from . import stats
from .parameters import CLASSES, is_new, table_row

UNFINISHED = ("failed", "incomplete", "missing")
# A change to the columns below or to rows.csv's: bump experiments.TIDY_FORMAT, so that the aggregate reruns.
# How near a run's last training loss may come to ln(classes), what predicting every class alike
# gives, before its row says the net did not learn: a verdict on such nets says nothing about trained ones.
UNLEARNED_SHARE = 0.97
COMPUTED = "computed"  # the run column of a computed figure's rows (no run)
DIGITS = {"train_loss": 4}  # decimals a metric is shown with: a loss of 0.0723 is not 0.07
RUN_COLUMNS = ["run", "task", "dataset", "arch", "recipe", "variant_id", "seed", "status", "error", "final_test_error", "best_test_error", "best_epoch", "final_train_error", "final_train_loss", "best_train_loss",
               "bleu", "bleu_tokenization", "sacrebleu", "sacrebleu_signature", "test_sentences", "test_split_sentences", "dev_loss_averaged", "dev_loss_last", *CAPTION_METRICS, "spice_note", "features", "scst_updates", "train_length", "epochs_completed", "diverged_step", "parameters", "wall_time_s",
               "device", "git_commit"]


def read_run(results_dir: Path, run: str) -> dict:
    out = {"run": run, **layout.parse_run(run)}
    task = out["task"]
    path = results_dir / run / "metrics.json"
    if not path.exists():
        return {**out, **unfinished_status(results_dir / run)}
    m = json.loads(path.read_text())
    out.update(
        status="diverged" if m["diverged"] else "ok",
        epochs_completed=m.get("epochs_completed"),  # classification only; translation counts updates
        parameters=m.get("parameters"),
        train_length=train_length(m["spec"], task),
        wall_time_s=m["wall_time_s"],
        device=m["provenance"]["device"],
        git_commit=m["provenance"]["git_commit"],
    )
    if m["diverged"]:
        out["diverged_step"] = m["diverged_at"]["step"]
    elif task in ("translation", "captioning"):  # the score of the averaged checkpoints, from the evaluate rule
        eval_path = results_dir / run / "eval.json"
        if not eval_path.exists():
            return {**out, "status": "missing", "error": "trained, not evaluated (see evaluate.log)"}
        ev = json.loads(eval_path.read_text())
        if task == "translation":
            out.update(bleu=ev["bleu_tokenized"]["bleu"], bleu_tokenization=f"{out['dataset']}: {ev['bleu_tokenized'].get('tokenization') or 'not recorded'}",
                       sacrebleu=ev["sacrebleu"]["bleu"], sacrebleu_signature=ev["sacrebleu"]["signature"],
                       test_sentences=ev.get("test_sentences"), test_split_sentences=ev.get("test_split_sentences"),
                       dev_loss_averaged=ev.get("dev_loss_averaged"), dev_loss_last=ev.get("dev_loss_last"))
        else:  # SPICE is None where it could not run; spice_note says why
            out.update({m: ev[m] for m in CAPTION_METRICS}, spice_note=ev["spice_note"], features=ev["features"],
                       scst_updates=m["scst"]["updates"] if m.get("scst") else None)
    else:
        out.update(final_test_error=m["final"]["test_error"], best_test_error=m["best"]["test_error"], best_epoch=m["best"]["epoch"],
                   final_train_error=m["final"]["train_error"], final_train_loss=m["final"]["train_loss"],
                   best_train_loss=m["best"].get("train_loss"))  # runs trained before it was recorded: empty
    return out


def train_length(spec: dict, task: str) -> str:
    """How long the run trained, as its recipe says: epochs for a classifier, updates otherwise
    (and a captioner's self-critical updates after them)."""
    if task == "classification":
        return f"{spec['epochs']} epochs"
    scst = spec.get("scst") or {}
    return f"{spec['max_updates']} updates" + (f" + {scst['updates']} self-critical" if scst.get("updates") else "")


def unscored_reason(runs: pd.DataFrame, run_ids: list[str], metric: str) -> str:
    """Why finished runs have no value of the metric: SPICE's note (its jars missing, or it failed)."""
    if metric != "spice":
        return ""
    notes = [n for n in runs.loc[run_ids, "spice_note"] if isinstance(n, str) and n]
    return notes[0] if notes else ""


def unfinished_status(run_dir: Path) -> dict:
    """Why a run has no metrics.json: its failure record, leftover checkpoints, or nothing at all."""
    failed = run_dir / "failed.json"
    if failed.exists():
        return {"status": "failed", "error": json.loads(failed.read_text())["error"]}
    if any((run_dir / "checkpoints").glob("*.pt")):
        return {"status": "incomplete", "error": "checkpoints but no result: killed, or still running (see train.log)"}
    return {"status": "missing", "error": "never ran"}


def seed_values(runs: pd.DataFrame, run_ids: list[str], metric: str, epoch_basis: str) -> list[float | None]:
    """Each run's value of the metric, in the order given (a row's seeds); None where it has no result."""
    out = []
    for run_id in run_ids:
        r = runs.loc[run_id]
        if r["status"] != "ok":
            out.append(None)
        elif metric in ("bleu", *CAPTION_METRICS):
            out.append(None if pd.isna(r[metric]) else float(r[metric]))
        elif metric == "train_loss":
            out.append(float(r[f"{epoch_basis}_train_loss"]))
        else:
            error = float(r[f"{epoch_basis}_test_error"])
            out.append(100.0 - error if metric == "test_accuracy" else error)
    return out


def measured_values(results_dir: Path, runs: pd.DataFrame, run_ids: list[str], measurement: str, quantity: str, at: str) -> list[float | None]:
    """Each run's measured quantity on its first snapshot (at: init) or its last (final), in the
    order given; None where the run has no result or no measurement (a partial report)."""
    out = []
    for run_id in run_ids:
        path = results_dir / run_id / "measure" / f"{measurement}.csv"
        if runs.loc[run_id, "status"] != "ok" or not path.exists():
            out.append(None)
            continue
        frame = pd.read_csv(path)
        frame = frame[frame["quantity"] == quantity]
        epoch = frame["epoch"].min() if at == "init" else frame["epoch"].max()
        out.append(float(frame.loc[frame["epoch"] == epoch, "value"].iloc[0]))
    return out


def row_seed_values(results_dir: Path, runs: pd.DataFrame, run_ids: list[str], row: TableRow, metric: str, measurement: str | None,
                    epoch_basis: str) -> list[float | None]:
    """A row's value per seed: its measured quantity (a row naming `quantity`), else its runs' metric."""
    if row.quantity is not MISSING:
        return measured_values(results_dir, runs, run_ids, measurement, row.quantity, row.need("at"))
    return seed_values(runs, run_ids, metric, epoch_basis)


def shown_values(runs: pd.DataFrame, run_ids: list[str], each: list[float | None], metric: str) -> tuple[list[float], list]:
    """(finished values, per-seed display list with the status in place of a number)."""
    shown = [(runs.loc[run_id, "status"] if runs.loc[run_id, "status"] != "ok" else "not measured") if v is None else round_for(v, metric)
             for run_id, v in zip(run_ids, each)]
    return [v for v in each if v is not None], shown


def round_for(value: float, metric: str) -> float:
    """A value as the report shows it: the metric's decimals (DIGITS), or 4 significant digits for
    a measured quantity, whose scale the metric's name does not tell (a decay term of 2e-6)."""
    if metric in METRICS:
        return round(value, DIGITS.get(metric, 2))
    return float(f"{value:.4g}")


def bootstrap_p_values(results_dir: Path, runs: pd.DataFrame, row_runs: list[str], baseline_runs: list[str], tested: dict) -> list:
    """sacreBLEU's paired bootstrap of each seed's system against the baseline of the same seed,
    on the detokenized test hypotheses each evaluate job keeps (None where either is missing).
    `tested` holds the p-values of the pairs already tested in this aggregate: the tables of one
    corpus share their runs (at mini every translation table compares the same few)."""
    from ..evaluate.bleu import paired_bootstrap, read_lines

    out = []
    for run, base in zip(row_runs, baseline_runs):
        if runs.loc[run, "status"] != "ok" or runs.loc[base, "status"] != "ok":
            out.append(None)
            continue
        if (run, base) not in tested:
            hyp, base_hyp = (read_lines(results_dir / r / "hyp.detok.txt") for r in (run, base))
            tested[run, base] = paired_bootstrap(base_hyp, hyp, read_lines(results_dir / run / "ref.detok.txt"))["p_value"]
        out.append(tested[run, base])
    return out


def loop_time_ratio(runs: pd.DataFrame, row_runs: list[str], baseline_runs: list[str]) -> float:
    """The row's training-loop time over its baseline's, each the mean of its finished runs'
    wall_time_s: the same recipe, so the same updates, so the ratio of their step times (evaluation
    inside the loop included), measured in this run on this run's machine. NaN without a finished
    run on either side."""
    def mean_time(ids):
        ok = runs.loc[ids]
        return ok.loc[ok["status"] == "ok", "wall_time_s"].astype(float).mean()

    return float(mean_time(row_runs) / mean_time(baseline_runs))


def unlearned_note(train_losses: pd.Series, dataset: str) -> str:
    """What a row says when its nets did not learn: their mean last training loss is within
    UNLEARNED_SHARE of ln(classes) (every class predicted alike); empty otherwise or when unknown."""
    loss = train_losses.astype(float).mean()
    if dataset not in CLASSES or math.isnan(loss):
        return ""
    chance = math.log(CLASSES[dataset])
    if loss < UNLEARNED_SHARE * chance:
        return ""
    return (f"These nets did not learn at this scale: their training loss ended at {loss:.3f}, near ln {CLASSES[dataset]} = "
            f"{chance:.3f}, which predicting every class alike gives.")


def averaging_note(runs: pd.DataFrame) -> str:
    """What a translation row says when averaging its checkpoints made the model worse on the dev
    set: the mean dev loss of its averaged models against that of their last checkpoints (runs
    evaluated before the evaluation recorded them: nothing)."""
    losses = runs[["dev_loss_averaged", "dev_loss_last"]].astype(float).dropna()
    if losses.empty:
        return ""
    averaged, last = losses["dev_loss_averaged"].mean(), losses["dev_loss_last"].mean()
    if averaged <= last:
        return ""
    return (f"Averaging made the dev loss worse: {averaged:.3f} for the averaged checkpoints against {last:.3f} at the last "
            f"one (mean over {len(losses)} seed{'s' if len(losses) != 1 else ''}); the BLEU is the averaged model's.")


def paper_model(row: TableRow) -> str:
    """The paper's model a table row stands for, as "ran as" names it: "depth 110", "size big", or
    "model" where the size is the paper's own (the captioner: `size: paper`)."""
    if row.depth is not MISSING:
        return f"depth {row.depth}"
    return "model" if row.size == "paper" else f"size {row.size}"


def aggregate(plan_rows: list[dict], results_dir: str | Path, tables: dict | str | Path | list, epoch_basis: str,
              parameters: dict[tuple[str, str], int] | None = None) -> dict[str, pd.DataFrame]:
    """The tidy tables of the plan's rows; `tables` by id (a resolved plan's), or their YAML files.
    `parameters`: each row's count at the paper's size (parameters.csv, by table and label); a row
    whose count is not given shows none."""
    results_dir = Path(results_dir)
    tables = tables if isinstance(tables, dict) else load_tables(tables)
    run_ids = list(dict.fromkeys(r for row in plan_rows for r in row["runs"]))
    runs = pd.DataFrame([read_run(results_dir, r) for r in run_ids]).reindex(columns=RUN_COLUMNS).set_index("run", drop=False)

    by_label = {(row["table"], row["label"]): row for row in plan_rows}
    bootstrapped: dict[tuple[str, str], float] = {}  # (run, baseline run) -> p-value, for this call only
    baseline_labels = {(row["table"], row["baseline"]) for row in plan_rows}
    out_rows = []
    for plan_row in plan_rows:
        table = tables[plan_row["table"]]
        row = table_row(plan_row, tables)
        new = is_new(table, row)
        metric = row_metric(table, row)
        higher = higher_is_better(table, row)
        each = row_seed_values(results_dir, runs, plan_row["runs"], row, metric, table.get("measurement"), epoch_basis)
        values, shown = shown_values(runs, plan_row["runs"], each, metric)
        unscored = "" if values else unscored_reason(runs, plan_row["runs"], metric)
        if unscored:  # finished runs without this metric (SPICE without its jars): say so in each seed's place
            shown = ["unavailable" if v == "not measured" else v for v in shown]
        first = runs.loc[plan_row["runs"][0]]  # every row has >= 1 run: seeds >= 1 (config schema)
        line = {
            "table": plan_row["table"], "row": plan_row["row"], "label": plan_row["label"], "formula": row.get("formula", ""),
            "note": " ".join(filter(None, [row.get("note", ""), unscored])),
            "paper_dataset": row.dataset, "paper_arch": row.get("depth", row.get("size")),
            "paper_model": paper_model(row),
            "dataset": first["dataset"], "arch": first["arch"], "recipe": first["recipe"], "variant_id": first["variant_id"],
            "metric": metric, "higher_is_better": higher, "epoch_basis": epoch_basis, "paper": row.paper, "new": new,
            "at": row.get("at", ""), "n": len(values), "n_runs": len(plan_row["runs"]),
            "n_diverged": shown.count("diverged"), "n_unfinished": sum(shown.count(s) for s in UNFINISHED),
            # NaN (an empty cell in rows.csv) without a finished seed; std also with only one
            "mean": pd.Series(values, dtype=float).mean(), "std": pd.Series(values, dtype=float).std(ddof=1),
            "values": json.dumps(shown), "baseline": plan_row["baseline"],
            **({"series": row.need("series"), "layers": row.need("layers")} if "plot" in table else {}),  # the table's plot (workflow/schemas/tables.schema.yaml)
        }
        line["delta"] = line["mean"] - row.paper if row.paper is not None else float("nan")
        baseline = by_label.get((plan_row["table"], plan_row["baseline"]))
        if baseline is None or baseline is plan_row:
            is_baseline = (plan_row["table"], plan_row["label"]) in baseline_labels
            line.update(verdict="baseline" if is_baseline else "", reason="")
        else:
            base_row = TableRow.from_dict(table["rows"][baseline["row"]])
            base_each = row_seed_values(results_dir, runs, baseline["runs"], base_row, metric, table.get("measurement"), epoch_basis)
            base_values = [v for v in base_each if v is not None]
            if table.get("ratio"):  # the row against its baseline as a factor, beside the paper's
                line["ratio"] = line["mean"] / pd.Series(base_values, dtype=float).mean()
                line["paper_ratio"] = row.paper / base_row.paper if None not in (row.paper, base_row.paper) else float("nan")
            if set(plan_row["runs"]) == set(baseline["runs"]):  # e.g. two paper depths one mini depth stands for
                v = stats.Verdict("no claim", None, None, None, "the same runs as its baseline at this scale: a row cannot be tested against itself")
            elif new:
                v = stats.compare_new(values, base_values, higher)
            elif None in (row.paper, base_row.paper):
                v = stats.Verdict("no claim", None, stats.difference_of_means(values, base_values), None, "the paper's value is not in our copy of its text")
            elif row.get("claim") == "same":  # seed by seed (paper 002's equivalent training)
                v = stats.compare_same(each, base_each, row.paper, base_row.paper)
            else:
                v = stats.compare(values, base_values, row.paper, base_row.paper, higher)
                # power: the seeds the paper's difference needs at this run's spreads, and whether its own runs had them
                paper_effect = row.paper - base_row.paper
                line["seeds_needed"] = stats.seeds_needed(values, base_values, paper_effect)
                line["paper_runs"] = (table.get("paper_runs") or {}).get("runs")
                line["paper_resolved"] = stats.paper_could_resolve(line["paper_runs"], values, base_values, paper_effect,
                                                                   same_data=line["dataset"] == row.dataset)
            line.update(verdict=v.verdict, p_value=v.p_value, difference=v.difference, resolvable=v.resolvable, reason=v.reason)
            if not values or not base_values:  # nothing to compare: say so rather than "inconclusive"
                line.update(verdict="no result", reason=unscored or "no finished seed in this row or its baseline")
            if table["task"] == "translation":
                line["bootstrap_p"] = json.dumps(bootstrap_p_values(results_dir, runs, plan_row["runs"], baseline["runs"], bootstrapped))
        count = (parameters or {}).get((plan_row["table"], plan_row["label"]), float("nan"))
        if new and table["task"] in ("classification", "translation"):  # what the row's design costs, beside what it gains
            line["parameters_at_paper_size"] = count
            line["loop_time_ratio"] = loop_time_ratio(runs, plan_row["runs"], (baseline or plan_row)["runs"])
        ok = [r for r in plan_row["runs"] if runs.loc[r, "status"] == "ok"]
        unlearned = unlearned_note(runs.loc[ok, "final_train_loss"], first["dataset"]) if table["task"] == "classification" and ok else ""
        line.update(note=" ".join(filter(None, [line["note"], unlearned])), unlearned=bool(unlearned))
        if table["task"] == "translation":
            line["note"] = " ".join(filter(None, [line["note"], averaging_note(runs.loc[ok])]))
            line["sacrebleu"] = runs.loc[ok, "sacrebleu"].astype(float).mean()
            line["parameters_vocabulary"] = VOCAB_SIZES[row.dataset]
        if row.paper_train_error is not MISSING:  # the training error of the last epoch, beside the paper's
            line["train_error"] = runs.loc[ok, "final_train_error"].astype(float).mean()
            line["paper_train_error"] = row.paper_train_error
        if table["task"] == "translation" or row.paper_parameters is not MISSING:
            line["parameters_at_paper_size"] = count
            line["paper_parameters"] = row.get("paper_parameters")
        out_rows.append(line)

    curves = []
    for run_id in run_ids:
        log = results_dir / run_id / "train_log.csv"
        if log.exists() and log.stat().st_size:
            frame = pd.read_csv(log)
            frame.insert(0, "run", run_id)
            curves.append(frame)
    return {
        "runs": runs.reset_index(drop=True),
        "rows": pd.DataFrame(out_rows),
        "curves": pd.concat(curves, ignore_index=True) if curves else pd.DataFrame(columns=["run", "epoch"]),
        "caption_samples": caption_samples(plan_rows, tables, results_dir),
    }


SAMPLE_COLUMNS = ["table", "model", "run", "image", "thumbnail", "reference", "caption"]


def caption_samples(plan_rows: list[dict], tables: dict, results_dir: Path) -> pd.DataFrame:
    """Per captioning table and model (a row label before its ", metric"), the captions its first
    seed gave the test images with thumbnails (eval.json's samples), for the report's gallery."""
    out, seen = [], set()
    for row in plan_rows:
        run = row["runs"][0]
        if tables[row["table"]]["task"] != "captioning" or (row["table"], run) in seen:
            continue
        seen.add((row["table"], run))
        path = results_dir / run / "eval.json"
        samples = json.loads(path.read_text()).get("samples", []) if path.exists() else []
        out += [{"table": row["table"], "model": row["label"].split(", ")[0], "run": run, **s} for s in samples]
    return pd.DataFrame(out, columns=SAMPLE_COLUMNS)


FIGURE_COLUMNS = ["figure", "cell", "label", "run", "seed"]


def aggregate_figures(measures: list[dict], results_dir: str | Path, runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The figures' data: every measured run's tidy table, tagged with its figure, cell and seed
    (figures.csv), and per figure cell what the mean over its finished runs shows, in the
    measurement's own words (figure_cells.csv). Runs that diverged or did not finish are counted,
    never measured. `runs` gains the runs that only figures name (runs.csv lists every run)."""
    from .. import measure

    results_dir = Path(results_dir)
    frames, cells = [], []
    known = set(runs["run"])
    only_figures = [r for r in dict.fromkeys(r for m in measures for r in m["runs"]) if r not in known]
    if only_figures:
        extra = pd.DataFrame([read_run(results_dir, r) for r in only_figures]).reindex(columns=RUN_COLUMNS)
        runs = pd.concat([runs, extra], ignore_index=True)
    status = runs.set_index("run")["status"] if len(runs) else pd.Series(dtype=str)
    computed: dict[tuple, pd.DataFrame] = {}  # (measurement, settings) -> its curves, computed once
    for m in measures:
        if "curve" in m:  # computed, no run (measure/__init__.py: a measurement of no task)
            key = (m["measurement"], json.dumps(m["settings"], sort_keys=True))
            if key not in computed:
                computed[key] = measure.get(m["measurement"]).measure(None, None, m["settings"], None)
            curve = computed[key][computed[key]["curve"] == m["curve"]].drop(columns="curve").reset_index(drop=True)
            ok = [COMPUTED]
        else:
            ok = [r for r in m["runs"] if status.get(r) == "ok" and (results_dir / r / "measure" / f"{m['measurement']}.csv").exists()]
        cell_frames = []
        for run in ok:
            frame = curve.copy() if run == COMPUTED else pd.read_csv(results_dir / run / "measure" / f"{m['measurement']}.csv")
            if m.get("quantities"):  # the figure draws these of the measurement's quantities
                frame = frame[frame["quantity"].isin(m["quantities"])].reset_index(drop=True)
            seed = 0 if run == COMPUTED else int(run.rsplit("seed", 1)[1])
            for i, (key, value) in enumerate(zip(FIGURE_COLUMNS, (m["figure"], m["cell"], m["label"], run, seed))):
                frame.insert(i, key, value)
            cell_frames.append(frame)
        frames += cell_frames
        summary = ""
        if cell_frames:
            measured = pd.concat(cell_frames, ignore_index=True)
            keys = [c for c in measured.columns if c not in (*FIGURE_COLUMNS, "value")]
            mean = measured.groupby(keys, as_index=False, dropna=False)["value"].mean()  # over seeds (rows may leave a key empty)
            summary = measure.get(m["measurement"]).summarize(mean)
        cells.append({"figure": m["figure"], "cell": m["cell"], "label": m["label"], "measurement": m["measurement"],
                      "kind": measure.get(m["measurement"]).kind, "n": len(ok), "n_runs": max(len(m["runs"]), len(ok)), "summary": summary,
                      "unlearned": unlearned_cell(runs, ok)})
    return {
        "runs": runs,
        "figures": pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*FIGURE_COLUMNS, "value"]),
        "figure_cells": pd.DataFrame(cells, columns=FIGURE_CELL_COLUMNS),
    }


FIGURE_CELL_COLUMNS = ["figure", "cell", "label", "measurement", "kind", "n", "n_runs", "summary", "unlearned"]


def unlearned_cell(runs: pd.DataFrame, measured: list[str]) -> str:
    """A figure cell's unlearned_note over the classification runs it measured (empty for other
    tasks and computed cells): a check that reads nets which did not learn cannot test a claim
    about trained ones (figure_checks.judge)."""
    if runs.empty or "final_train_loss" not in runs:  # no classification run read
        return ""
    mine = runs[runs["run"].isin(measured) & (runs["task"] == "classification")]
    if mine.empty:
        return ""
    return unlearned_note(mine["final_train_loss"], mine["dataset"].iloc[0])

