"""The disk a scale's runs need: what each run keeps when it ends, and the captioning features.

What a run keeps (train/*.py), in copies of its model's weights:
- classification: checkpoints/last.pt (the weights and SGD's momentum) and a snapshot of the
  weights at each of `recipes.snapshot_epochs(epochs, snapshots)` and, where there are any, after
  the first step;
- translation: the newest `keep_checkpoints` step<N>.pt (the weights, for averaging), last.pt (the
  weights and Adam's two moments) and averaged.pt;
- captioning: the same for its cross-entropy stage, and scst.pt (the weights and Adam's moments)
  when it trains self-critically.
How many weight-sized copies each kind of file is (`copies`) was measured on the rehearsal's files
(config/costs/disk.yaml, written by benchmarks/disk_use.py): a file's bytes over its run's
parameters times their bytes (4, or 8 in float64). A run's bytes are its kinds' copies times its
model's parameters at the scale (counted on the meta device) times their bytes.

The captioning features (data/coco.py, grid features): MSCOCO's images x (size / 32)^2 regions x
(2,048 + 2) values x 2 bytes (float16); while a split is cut to the images that could be read, its
file is written a second time (FeatureWriter.close), so the peak is higher by the largest split.
Downloads are not counted (their bytes are the mirror's; the lock file records them once fetched).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from ..catalog import ConfigError
from ..experiments import Plan, Run, train_spec
from ..recipes import resume_points, snapshot_epochs

KINDS = {
    "classification": ("last", "snapshot"),
    "translation": ("step", "last", "averaged"),
    "captioning": ("step", "last", "averaged", "scst"),
}
# Karpathy's MSCOCO splits: 113,287 training, 5,000 validation and 5,000 test images (Karpathy and
# Fei-Fei 2015), as data/coco.py prepares them; the largest is the training split
COCO_IMAGES = {"train": 113_287, "val": 5_000, "test": 5_000}
GRID_STRIDE = 32  # ResNet-101's last map: 224 / 32 = 7 x 7 regions
BACKBONE_CHANNELS = 2048
CENTRE_VALUES = 2  # each region's centre, appended (features.grid_centres)
FEATURE_BYTES = 2  # float16
# the captioner's vocabulary at paper scale: the words of the training captions seen at least 5 times,
# about 10,000 in MSCOCO (the prepared data's own count is what a run uses)
COCO_VOCABULARY = 10_000


def load_copies(path: str | Path) -> dict:
    """The measured file sizes: source (what, when) and copies {"task/kind": copies of the weights}."""
    data = yaml.safe_load(Path(path).read_text())
    for key in ("source", "copies"):
        if key not in data:
            raise ConfigError(f"{path}: missing key {key!r}")
    return data


def copies_of(config: dict) -> dict[str, float]:
    """The copies of a scale's disk file (its `gpu_costs.disk`, else the schema's default
    config/costs/disk.yaml): for a scale read as written, without the workflow's defaults."""
    return load_copies(config.get("gpu_costs", {}).get("disk", "config/costs/disk.yaml"))["copies"]


def kept_files(run: Run) -> dict[str, int]:
    """How many files of each kind the run keeps when it ends (module docstring)."""
    recipe = json.loads(run.recipe_json)
    if run.task == "classification":
        kept = len(snapshot_epochs(recipe["epochs"], recipe.get("snapshots", 0)))
        return {"last": 1, "snapshot": kept + 1 if kept else 0}  # the first step's weights too
    kept = {"step": recipe["keep_checkpoints"], "last": 1, "averaged": 1}
    if run.task == "captioning" and recipe.get("scst"):
        kept["scst"] = 1
    return kept


def written_files(run: Run, checkpoint_s: float | None = None) -> dict[str, int]:
    """How many files of each kind the run writes while it trains (analysis/cost.py's checkpoint
    writes): classification last.pt after every epoch and each snapshot once; translation
    step<N>.pt for the checkpoints averaging reads (of one every `checkpoint_every` updates and at
    the last) and last.pt at its resume points, with checkpoints `checkpoint_s` seconds apart
    (recipes.resume_points; at every checkpoint without the time); captioning the same,
    then, self-critically, scst.pt and a step file at each of its checkpoints. averaged.pt is
    evaluation's, not training's."""
    recipe = json.loads(run.recipe_json)
    if run.task == "classification":
        return {"last": recipe["epochs"], "snapshot": kept_files(run)["snapshot"]}
    checkpoints = -(-recipe["max_updates"] // recipe["checkpoint_every"])
    written = {"step": min(recipe["keep_checkpoints"], checkpoints), "last": resume_points(checkpoints, checkpoint_s)}
    if run.task == "captioning" and (scst := recipe.get("scst")):
        scst_checkpoints = -(-scst["updates"] // scst["checkpoint_every"])
        written["step"] += scst_checkpoints
        written["scst"] = scst_checkpoints
    return written


def weight_bytes(run: Run, config: dict) -> int:
    """The bytes of the run's weights: its model's parameters at the run's size, 4 bytes each (8 in float64)."""
    from .. import models
    from .parameters import data_inputs, parameters_of

    spec = train_spec(config, run)
    if run.task == "captioning":
        inputs = {"vocab_size": COCO_VOCABULARY, "feature_dim": BACKBONE_CHANNELS + CENTRE_VALUES}
    else:
        inputs = data_inputs(run.task, run.dataset)
    counted = models.model_spec(spec, **inputs)
    return parameters_of(counted.to_json()) * (8 if spec.get("dtype") == "float64" else 4)


def run_bytes(run: Run, config: dict, copies: dict[str, float]) -> float:
    size = weight_bytes(run, config)
    total = 0.0
    for kind, count in kept_files(run).items():
        key = f"{run.task}/{kind}"
        if key not in copies:
            raise ConfigError(f"disk: no measured size for {key!r} files; known: {', '.join(sorted(copies))}")
        total += count * copies[key] * size
    return total


def coco_feature_bytes(config: dict) -> tuple[float, float]:
    """(bytes the MSCOCO grid features take, bytes at the peak of their writing)."""
    features = config["captioning"].get("features", {})
    if features.get("kind", "grid") != "grid":
        raise ConfigError("disk: only grid features are estimated (bottom-up features take the TSVs' boxes per image)")
    size = features.get("backbone", {}).get("size", 224)
    per_image = (size // GRID_STRIDE) ** 2 * (BACKBONE_CHANNELS + CENTRE_VALUES) * FEATURE_BYTES
    return sum(COCO_IMAGES.values()) * per_image, (sum(COCO_IMAGES.values()) + max(COCO_IMAGES.values())) * per_image


def scale_disk(plan: Plan, config: dict, copies: dict[str, float]) -> dict[str, float]:
    """Bytes per table (its runs' kept files; a run two tables share counts in both) and in total
    (every run of the plan once, tables' and figures', plus the captioning features), and the peak."""
    bytes_of = {path: run_bytes(run, config, copies) for path, run in plan.runs.items()}
    tables: dict[str, set] = {}
    for row in plan.rows:
        tables.setdefault(row["table"], set()).update(row["runs"])
    out = {table: math.fsum(bytes_of[r] for r in runs) for table, runs in tables.items()}  # exact: a set's order varies by process
    runs_total = math.fsum(bytes_of.values())
    captioning = any(run.task == "captioning" for run in plan.runs.values())
    features, features_peak = coco_feature_bytes(config) if captioning and "mscoco" in plan.datasets() else (0.0, 0.0)
    out["features"] = features
    out["total"] = runs_total + features
    out["peak"] = runs_total + features_peak
    return out


def table_disk(plan: Plan, config: dict, copies: dict):
    """scale_disk as rows (scale, table, disk_gb, disk_source): each table, then `features`,
    `total` and `peak`."""
    import pandas as pd

    sizes = scale_disk(plan, config, copies["copies"])
    return pd.DataFrame([{"scale": config["scale"], "table": table, "disk_gb": size / 1e9, "disk_source": copies["source"]}
                         for table, size in sizes.items()])
