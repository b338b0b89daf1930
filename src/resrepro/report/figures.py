"""Figures for the report, each built by one function from the tidy tables, returned as PNG bytes."""

from __future__ import annotations

import io
import textwrap

import matplotlib

matplotlib.use("Agg")  # no display on clusters and CI
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402,F401  (matplotlib.ticker.MaxNLocator)
import pandas as pd  # noqa: E402

from ..catalog import snapshot_name  # noqa: E402


def to_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


# What a learning curve plots, per task: the x column and the two panels (column, label).
CURVES = {
    "classification": ("epoch", [("train_loss", "train loss (augmented batches)"), ("test_error", "test error (%)")]),
    "translation": ("step", [("train_loss", "train loss (label-smoothed)"), ("dev_loss", "dev loss (label-smoothed)")]),
    "captioning": ("step", [("train_loss", "train loss (label-smoothed)"), ("dev_loss", "val loss (label-smoothed)")]),
}


SPLIT_STYLES = {"train": "-", "test": "--"}  # the paper draws training solid, held-out dashed


def _wrap(text: str, width: int = 40) -> str:
    """Long quantity names on several lines, so that neighbouring panels' labels do not overlap."""
    return textwrap.fill(text, width)


def _lines(frame: pd.DataFrame, title: str, x: str, xlabel: str, log_y: bool = False, log_x_falling: bool = False,
           log_x: bool = False) -> bytes | None:
    """One panel per quantity, `x` on the x axis, one colour per figure cell (and per group of
    examples, scale or snapshot, where a `group`, `scale` or `epoch` column names one; solid: training data, dashed:
    held-out, where a `split` column says), the mean over seeds with their range shaded."""
    frame = frame.dropna(axis=1, how="all")  # figures.csv's columns of other measurements
    if frame.empty or "value" not in frame:
        return None
    frame = frame.assign(split=frame["split"]) if "split" in frame else frame.assign(split="")
    if "group" in frame:  # a group of examples (borderline, ...) is a line of its own
        frame = frame.assign(label=frame["label"] + ", " + frame["group"])
    if "scale" in frame:  # so is each scaling of an unrolled block
        frame = frame.assign(label=frame["label"] + ", scale " + frame["scale"].map("{:g}".format))
    if x != "epoch" and "epoch" in frame and frame["epoch"].nunique() > 1:  # so is each snapshot measured
        frame = frame.assign(label=frame["label"] + ", " + frame["epoch"].map(snapshot_name))
    quantities = list(dict.fromkeys(frame["quantity"]))
    fig, axes = plt.subplots(1, len(quantities), figsize=(max(6.0, 5.0 * len(quantities)), 3.6), squeeze=False)
    for ax, quantity in zip(axes[0], quantities):
        of_quantity = frame[frame["quantity"] == quantity]
        for colour, (label, cell) in enumerate(of_quantity.groupby("label", sort=False)):
            for split, part in cell.groupby("split", sort=False):
                by_x = part.groupby(x)["value"]
                mean = by_x.mean()
                runs = part["run"].nunique()
                name = f"{label}{f', {split}' if split else ''} ({runs} run{'s' if runs != 1 else ''})"
                ax.plot(mean.index, mean.values, SPLIT_STYLES.get(split, "-"), color=f"C{colour}", marker=".", label=name)
                ax.fill_between(mean.index, by_x.min().values, by_x.max().values, color=f"C{colour}", alpha=0.2)
        ax.set(xlabel=xlabel, ylabel=_wrap(f"mean {quantity}"), title=_wrap(f"{title}: {quantity}", 50))
        if log_y:
            _log_scale(ax, of_quantity["value"])
        if log_x_falling or log_x:
            ax.set_xscale("log")
        if log_x_falling:  # a training loss: falls as training goes on, so drawn from high to low
            ax.invert_xaxis()
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))  # outside: lines stay readable
    return to_png(fig)


def _log_scale(ax, values: pd.Series) -> None:
    """A log y axis; where some values are exactly 0 (two nets equal to the last bit), a symmetric
    log axis that is linear up to the smallest positive value, so that the zeros are drawn at the
    bottom instead of dropped."""
    positive = values[values > 0]
    if (values == 0).any() and len(positive):
        ax.set_yscale("symlog", linthresh=float(positive.min()))
        ax.set_ylim(bottom=0)
    else:
        ax.set_yscale("log")


def per_block(frame: pd.DataFrame, title: str) -> bytes | None:
    """A measurement per residual block (columns block, quantity, value, and optionally split; measure/)."""
    return _lines(frame, title, "block", "residual block (1 = nearest the input)")


def per_epoch(frame: pd.DataFrame, title: str) -> bytes | None:
    """A measurement per epoch (columns epoch, quantity, value: a learning curve), on a log scale
    where no value is negative (a difference between two curves may be)."""
    values = frame["value"] if "value" in frame else pd.Series(dtype=float)
    return _lines(frame, title, "epoch", "epoch", log_y=bool((values >= 0).all() and (values > 0).any()))


def per_step(frame: pd.DataFrame, title: str) -> bytes | None:
    """A measurement per extra step of an unrolled block (columns step, quantity, value, ...)."""
    return _lines(frame, title, "step", "extra steps of the last block")


def per_level(frame: pd.DataFrame, title: str) -> bytes | None:
    """A measurement per level of training loss reached (columns level, quantity, value; `epoch`,
    when the level was reached, differs between seeds and is not a snapshot: one line per net)."""
    return _lines(frame.drop(columns="epoch", errors="ignore"), title, "level", "training loss reached (log scale, falling)",
                  log_x_falling=True)


def per_ratio(frame: pd.DataFrame, title: str) -> bytes | None:
    """A computed curve against the ratio of two deviations (columns ratio, quantity, value), on a log x axis."""
    return _lines(frame, title, "ratio", "ratio of the deviations (log scale)", log_x=True)


def per_gradient_std(frame: pd.DataFrame, title: str) -> bytes | None:
    """A computed curve against the std of the final gradients (columns gradient_std, quantity, value), on a log x axis."""
    return _lines(frame, title, "gradient_std", "standard deviation of the final gradients (log scale)", log_x=True)


def per_p(frame: pd.DataFrame, title: str) -> bytes | None:
    """A computed curve against the probability p that a ReLU passes its entry (columns p, quantity, value)."""
    return _lines(frame, title, "p", "probability p that a ReLU passes its entry")


def per_epoch_block(frame: pd.DataFrame, title: str) -> bytes | None:
    """A measurement per block over training (columns epoch, block, quantity, value, split): one
    panel per quantity and figure cell, one line per block coloured from blue (lowest) to red
    (highest), as the paper draws them; the mean over seeds."""
    frame = frame.dropna(axis=1, how="all")  # figures.csv's columns of other measurements
    if frame.empty or "value" not in frame:
        return None
    frame = frame.assign(split=frame["split"]) if "split" in frame else frame.assign(split="")
    quantities, labels = list(dict.fromkeys(frame["quantity"])), list(dict.fromkeys(frame["label"]))
    fig, axes = plt.subplots(len(quantities), len(labels), figsize=(max(6.0, 3.6 * len(labels)), 3.2 * len(quantities)), squeeze=False)
    for row, quantity in enumerate(quantities):
        for col, label in enumerate(labels):
            ax, part = axes[row][col], frame[(frame["quantity"] == quantity) & (frame["label"] == label)]
            if part.empty:
                ax.set_axis_off()
                continue
            lo, hi = part["block"].min(), part["block"].max()
            colours = plt.get_cmap("coolwarm")
            for (block, split), curve in part.groupby(["block", "split"]):
                mean = curve.groupby("epoch")["value"].mean()
                ax.plot(mean.index, mean.values, SPLIT_STYLES.get(split, "-"), color=colours((block - lo) / max(1, hi - lo)), marker=".", ms=3)
            runs = part["run"].nunique()
            ax.set(xlabel="epoch", ylabel=_wrap(f"mean {quantity}") if col == 0 else "", title=_wrap(f"{label} ({runs} run{'s' if runs != 1 else ''})"))
            ax.grid(alpha=0.3)
            bar = fig.colorbar(plt.cm.ScalarMappable(cmap=colours, norm=matplotlib.colors.Normalize(lo, hi)), ax=ax)
            bar.set_label("residual block")
            bar.locator = matplotlib.ticker.MaxNLocator(integer=True)
            bar.update_ticks()
    styles = {"train": "solid: training data", "test": "dashed: held-out data"}
    fig.suptitle(f"{title} ({', '.join(styles[s] for s in styles if s in set(frame['split'])) or 'all data'})", y=1.02)
    fig.tight_layout()
    return to_png(fig)


def histogram(frame: pd.DataFrame, title: str) -> bytes | None:
    """Counts per bin (columns part, bin, value, and epoch where the measurement read snapshots):
    one panel per part (row) and for the first and the last snapshot (column), one step line per
    figure cell, the mean over seeds; counts on a log scale, where a few large weights stand
    beside thousands of small ones. Rows without a bin (a part's statistics) are not drawn."""
    frame = frame.dropna(axis=1, how="all")
    if "bin" in frame:
        frame = frame[frame["bin"].notna()]
    if frame.empty or "value" not in frame or "bin" not in frame:
        return None
    if "epoch" not in frame:  # measured once, on the trained net
        frame = frame.assign(epoch=-1)
    parts, epochs = list(dict.fromkeys(frame["part"])), sorted({frame["epoch"].min(), frame["epoch"].max()})
    fig, axes = plt.subplots(len(parts), len(epochs), figsize=(4.2 * len(epochs) + 2, 3.0 * len(parts)), squeeze=False)
    for row, part in enumerate(parts):
        for col, epoch in enumerate(epochs):
            ax = axes[row][col]
            at = frame[(frame["part"] == part) & (frame["epoch"] == epoch)]
            for colour, (label, cell) in enumerate(at.groupby("label", sort=False)):
                mean = cell.groupby("bin")["value"].mean()
                runs = cell["run"].nunique()
                ax.step(mean.index, mean.values.clip(min=0.5), where="mid", color=f"C{colour}", label=f"{label} ({runs} run{'s' if runs != 1 else ''})")
            when = "trained" if epoch == -1 else "initialisation" if epoch == 0 else f"epoch {epoch}"
            ax.set(yscale="log", xlabel="value", ylabel="count" if col == 0 else "", title=_wrap(f"{part}, {when}", 45))
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(title, y=1.02)
    fig.tight_layout()
    return to_png(fig)


# The drawing of each measurement kind (resrepro.measure.Measurement.kind).
DRAWINGS = {"per_ratio": per_ratio, "per_block": per_block, "per_epoch": per_epoch, "per_step": per_step, "per_epoch_block": per_epoch_block, "histogram": histogram,
            "per_level": per_level, "per_gradient_std": per_gradient_std, "per_p": per_p}


def learning_curves(table_rows: pd.DataFrame, curves: pd.DataFrame, runs_by_row: dict[str, list[str]], title: str, task: str) -> bytes | None:
    """Two panels of a task's training log, mean over seeds, one line per table row (rows sharing
    a cell are drawn once), log scale. Diverged runs simply end where they stopped."""
    if curves.empty:
        return None
    x, panels = CURVES[task]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    drawn, plotted = set(), 0
    for _, row in table_rows.iterrows():
        run_ids = tuple(runs_by_row[row["label"]])
        if run_ids in drawn:
            continue
        drawn.add(run_ids)
        frame = curves[curves["run"].isin(run_ids)]
        if frame.empty:
            continue
        plotted += 1
        mean = frame.groupby(x)[[column for column, _ in panels]].mean()
        for ax, (column, _) in zip(axes, panels):
            ax.plot(mean.index, mean[column], label=row["label"])
    if not plotted:  # no run of this table has a training log yet: no empty axes in the report
        plt.close(fig)
        return None
    for ax, (column, label) in zip(axes, panels):
        ax.set(xlabel=x, ylabel=label, yscale="log", title=f"{title}: {label}")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="upper right", ncol=1 if plotted < 7 else 2)
    return to_png(fig)


def metric_against_layers(table_rows: pd.DataFrame, title: str) -> bytes | None:
    """A table's metric (mean over seeds, a bar of one standard deviation) against `layers`, one
    line per `series` (the depth study: which variants train as the stack deepens). A depth whose
    seeds all diverged is a cross on the axis, labelled so."""
    if table_rows.empty or not table_rows["n"].add(table_rows["n_diverged"]).any():
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4))
    metric = table_rows["metric"].iloc[0]
    for series, rows in table_rows.groupby("series", sort=False):
        rows = rows.sort_values("layers")
        done = rows[rows["n"] > 0]
        line = ax.errorbar(done["layers"], done["mean"], yerr=done["std"].fillna(0.0), marker="o", capsize=3, label=series)
        lost = rows[(rows["n"] == 0) & (rows["n_diverged"] > 0)]
        if not lost.empty:
            ax.scatter(lost["layers"], [0.0] * len(lost), marker="x", s=60, color=line[0].get_color(), label=f"{series}: diverged")
    ax.set(xscale="log", xlabel="layers a side (encoder = decoder; the paper scale's, which each scale's sizes map)", ylabel=metric.replace("_", " "), title=f"{title}: {metric} against depth")
    ticks = sorted(table_rows["layers"].unique())
    ax.set_xticks(ticks, [str(int(t)) for t in ticks])
    ax.minorticks_off()
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return to_png(fig)


# One colour per verdict, as the report's text colours them; a row without a verdict in grey.
VERDICT_COLOURS = {"supported": "#1a7f37", "contradicted": "#b42318", "inconclusive": "#d4a017", "baseline": "#444444"}
NO_VERDICT_COLOUR = "#aaaaaa"
PAPER_MARKERS = ["o", "s", "^", "D", "v", "P"]


def paper_against_reproduced(rows: pd.DataFrame) -> bytes | None:
    """Every table row with a paper value and a reproduced mean (columns paper_id, metric, paper,
    mean, verdict): the paper's value on x, the reproduced one on y, one panel per metric (their
    units differ), the identity line, the colour of the row's verdict, the marker of its paper."""
    drawn = rows.dropna(subset=["paper", "mean"])
    if drawn.empty:
        return None
    metrics = list(dict.fromkeys(drawn["metric"]))
    markers = {paper: PAPER_MARKERS[i % len(PAPER_MARKERS)] for i, paper in enumerate(dict.fromkeys(rows["paper_id"]))}
    columns = min(4, len(metrics))
    fig, axes = plt.subplots(-(-len(metrics) // columns), columns, figsize=(3.3 * columns, 3.1 * -(-len(metrics) // columns)), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        mine = drawn[drawn["metric"] == metric]
        for (paper, verdict), group in mine.groupby(["paper_id", mine["verdict"].fillna("")], sort=False):
            ax.scatter(group["paper"], group["mean"], marker=markers[paper], color=VERDICT_COLOURS.get(verdict, NO_VERDICT_COLOUR),
                       edgecolor="black", linewidth=0.4, s=28, zorder=3)
        low, high = min(mine["paper"].min(), mine["mean"].min()), max(mine["paper"].max(), mine["mean"].max())
        if low > 0 and high / low > 100:  # e.g. paper 002's decay terms, 1e-3 beside 0.1: log axes keep them apart
            ax.set(xscale="log", yscale="log")
            ends = [low / 2, high * 2]
        else:
            pad = 0.05 * (high - low) or 0.05 * abs(high) or 0.05
            ends = [low - pad, high + pad]
        ax.plot(ends, ends, color="grey", linewidth=0.8, linestyle="--", zorder=1)
        ax.set(title=_wrap(metric.replace("_", " "), 30), xlabel="paper", ylabel="reproduced (mean over seeds)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    handles = [plt.Line2D([], [], marker="o", linestyle="", color=c, label=v) for v, c in VERDICT_COLOURS.items()]
    handles += [plt.Line2D([], [], marker="o", linestyle="", color=NO_VERDICT_COLOUR, label="no verdict")]
    handles += [plt.Line2D([], [], marker=m, linestyle="", color="white", markeredgecolor="black", label=p) for p, m in markers.items()]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, bbox_to_anchor=(0.5, 1.02), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return to_png(fig)
