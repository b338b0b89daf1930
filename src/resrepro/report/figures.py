"""Figures for the report, each built by one function from the tidy tables, returned as PNG bytes."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")  # no display on clusters and CI
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def to_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def learning_curves(table_rows: pd.DataFrame, curves: pd.DataFrame, runs_by_row: dict[str, list[str]], title: str) -> bytes | None:
    """Train loss and test error per epoch, mean over seeds, one line per table row (rows sharing
    a cell are drawn once). Diverged runs simply end where they stopped."""
    if curves.empty:
        return None
    fig, (ax_loss, ax_err) = plt.subplots(1, 2, figsize=(11, 3.8))
    drawn = set()
    for _, row in table_rows.iterrows():
        run_ids = tuple(runs_by_row[row["label"]])
        if run_ids in drawn:
            continue
        drawn.add(run_ids)
        frame = curves[curves["run"].isin(run_ids)]
        if frame.empty:
            continue
        mean = frame.groupby("epoch")[["train_loss", "test_error"]].mean()
        ax_loss.plot(mean.index, mean["train_loss"], label=row["label"])
        ax_err.plot(mean.index, mean["test_error"], label=row["label"])
    ax_loss.set(xlabel="epoch", ylabel="train loss (augmented batches)", yscale="log", title=f"{title}: train loss")
    ax_err.set(xlabel="epoch", ylabel="test error (%)", yscale="log", title=f"{title}: test error")
    for ax in (ax_loss, ax_err):
        ax.grid(alpha=0.3)
    ax_err.legend(fontsize=7, loc="upper right", ncol=1 if len(drawn) < 7 else 2)
    return to_png(fig)
