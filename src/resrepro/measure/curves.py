"""Paper 001 Figure 4: a run's learning curves, read from the training log it wrote.

"We show the learning curve of wSkip compared to 2rSkip ... wSkip and 2rSkip both achieve low
training loss, but wSkip has difficulty in starting learning and has higher validation loss."
The log (train/classification.py, one row per epoch) holds the training loss over the epoch's
augmented batches and the test set's loss and error after it; the test set is the held-out set.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import register

LABELS = {"train_loss": "training loss", "test_loss": "held-out loss", "train_error": "training error (%)",
          "test_error": "held-out error (%)"}


def measure_curve(run_dir: Path, settings: dict) -> pd.DataFrame:
    """Rows (epoch, quantity, value): each asked column of the run's train_log.csv per epoch."""
    log = pd.read_csv(Path(run_dir) / "train_log.csv")
    unknown = [q for q in settings["quantities"] if q not in LABELS or q not in log]
    if unknown:
        raise ValueError(f"learning_curve: {unknown[0]!r} is not a column of the training log; allowed: {', '.join(LABELS)}")
    return pd.DataFrame([{"epoch": int(row["epoch"]), "quantity": LABELS[q], "value": float(row[q])}
                         for q in settings["quantities"] for _, row in log.iterrows()])


def summarize_curve(frame: pd.DataFrame) -> str:
    """Where each curve starts, where it ends, and its lowest value (with its epoch)."""
    parts = []
    for quantity, curve in frame.groupby("quantity", sort=False):
        by_epoch = curve.groupby("epoch")["value"].mean().sort_index()
        parts.append(f"{quantity} {by_epoch.iloc[0]:.3g} at epoch {by_epoch.index[0]}, {by_epoch.iloc[-1]:.3g} at "
                     f"epoch {by_epoch.index[-1]}, lowest {by_epoch.min():.3g} (epoch {by_epoch.idxmin()})")
    return "; ".join(parts)


register("learning_curve", measure=measure_curve, summarize=summarize_curve, reads="log")


# Paper 002 SM D, Figure 8 (b): "with same training loss, the ResNets achieve smaller error". Each
# run's test error at the first epoch whose training loss is at or below each level, so two nets
# are compared where they fit the training data equally well; a level a run never reaches has no row.
ERROR_AT_LOSS = "test error (%) at the training loss"


def measure_error_at_loss(run_dir: Path, settings: dict) -> pd.DataFrame:
    """Rows (level, epoch, quantity, value): per level of `levels`, the first epoch whose training
    loss is at or below it and the test error after that epoch."""
    log = pd.read_csv(Path(run_dir) / "train_log.csv")
    rows = []
    for level in settings["levels"]:
        reached = log[log["train_loss"] <= level]
        if len(reached):
            first = reached.iloc[0]
            rows.append({"level": float(level), "epoch": int(first["epoch"]), "quantity": ERROR_AT_LOSS, "value": float(first["test_error"])})
    return pd.DataFrame(rows, columns=["level", "epoch", "quantity", "value"])


def summarize_error_at_loss(frame: pd.DataFrame) -> str:
    """The error at each level reached (mean over the runs that reached it)."""
    if frame.empty:
        return "no run reached any of the training-loss levels"
    by_level = frame.groupby("level")["value"].mean().sort_index(ascending=False)
    return "; ".join(f"{v:.3g}% at training loss {level:g}" for level, v in by_level.items())


register("error_at_loss", measure=measure_error_at_loss, summarize=summarize_error_at_loss, reads="log")
