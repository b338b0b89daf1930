"""Recipes: how each run is trained and how it is evaluated, resolved from a scale's config.

A task's block in a scale profile (``classification:``, ``translation:``, ``captioning:``) holds the recipe every
run of that task starts from. Its ``refine:`` list holds the papers' own protocols, each applied
over that recipe, in order, to the runs it matches::

    refine:
      - name: rskip-wmt                     # enters the results folder of every run it matches
        when: {paper: rskip, dataset: [wmt14_en_de, wmt14_en_fr]}
        set: {max_updates: 550000}
        source: 'Liu et al. 2020, Sec. 4.2: "... from 100,000 steps to 550,000 steps"'

``when`` names a cell as the paper's table does (``paper``, ``table`` (a table's or a figure's id),
``kind`` (``table`` or ``figure``), ``arch``, ``variant`` (its name, e.g. ``plain``), and the paper's
``dataset``, ``depth`` or ``size``, not what this scale runs); a list means any of its values. A run's folder
holds the names of the refinements applied to it (``default`` when none), so two runs whose
recipes differ never share a folder, and a cell that two tables name alike is trained once.

A task block's ``at_paper_size:`` list holds ``when`` matchers of the same keys: a cell that one of
them matches runs at the paper's own depth or size, not the one the scale's ``depths``/``sizes``
map gives it (a scale that runs each architecture once at its full size and every other cell small).

Keys are split by what changing them must redo: ``EVAL_KEYS`` only score a trained model
(averaging, decoding, scoring reruns), every other key trains it (the run retrains).
"""

from __future__ import annotations

import math

from .catalog import ConfigError

# A task block's keys that say how this scale maps the papers, not how a run trains.
# features: how the data is made; at_paper_size: which cells run at the paper's own size (the function below)
SCALE_KEYS = frozenset({"datasets", "depths", "sizes", "seeds", "gpus", "refine", "features", "at_paper_size"})
# test_sentences: the first N test sentences are decoded and scored (evaluate/translation.py)
EVAL_KEYS = {"classification": frozenset(),
             "translation": frozenset({"average_last", "beam", "alpha", "max_len_a", "max_len_b", "test_sentences"}),
             "captioning": frozenset({"average_last", "beam", "alpha", "max_len_b"})}
# Keys a recipe may leave out: the default applies (dropout: the Transformer preset's; lr_decay: 0.1;
# deterministic: off, torch's fastest kernels; snapshots: none; the speed switches: speed.DEFAULTS).
SPEED_KEYS = frozenset({"amp", "channels_last", "compile", "fused_optimizer", "tf32"})  # speed.DEFAULTS's keys (speed imports torch)
# `compile` values whose steps replay CUDA graphs (torch's cudagraph trees): one recording a shape
GRAPH_REPLAYS = ("cudagraphs", "reduce-overhead", "max-autotune")
# init: paper 002's simplified nets (models/simple_net.py) and the PreAct-ResNets (models/preact_resnet.INITS); dtype: float32 unless float64 (its SM B);
# length_bucket: 0, batches as long as their longest sentence (train/translation.pad_to_bucket);
# max_train_len: the model's positions, catalog.MAX_POSITIONS (train/translation.max_train_len);
# dev_sentences, test_sentences: the whole split (train/translation.dev_examples, evaluate/translation.py).
OPTIONAL_KEYS = {"classification": frozenset({"deterministic", "lr_decay", "snapshots", "init", "dtype"}) | SPEED_KEYS,
                 "translation": frozenset({"dropout", "deterministic", "length_bucket", "max_train_len", "dev_sentences",
                                           "test_sentences"}) | SPEED_KEYS,
                 "captioning": frozenset({"dropout", "deterministic", "scst", "max_train_len"}) | SPEED_KEYS}
MATCH_KEYS = ("paper", "table", "kind", "dataset", "arch", "depth", "size", "variant")
DEFAULT = "default"


def matches(when: dict, cell: dict) -> bool:
    """Whether every key of `when` holds the cell's value (or, for a list, one of its values).
    Compared as text: YAML gives depths as integers, `--config` as strings."""
    for key, wanted in when.items():
        options = wanted if isinstance(wanted, list) else [wanted]
        if str(cell.get(key)) not in {str(option) for option in options}:
            return False
    return True


def at_paper_size(task_config: dict, cell: dict) -> bool:
    """Whether the cell runs at the paper's own depth or size: one of the task's `at_paper_size`
    matchers holds for it. A small scale can so train each architecture once as the paper sized it
    (its checkpoints, averaging and memory) without paying that size in every cell."""
    return any(matches(when, cell) for when in task_config.get("at_paper_size", []))


def resolve(task_config: dict, cell: dict) -> tuple[str, dict]:
    """(name, recipe) of one cell: the task's recipe with each matching refinement applied in
    order; the name joins the refinements' names with "+", or is "default"."""
    recipe = {key: value for key, value in task_config.items() if key not in SCALE_KEYS}
    names = []
    for refinement in task_config.get("refine", []):
        if matches(refinement["when"], cell):
            recipe.update(refinement["set"])
            names.append(refinement["name"])
    return "+".join(names) or DEFAULT, recipe


def training_part(task: str, recipe: dict) -> dict:
    return {key: value for key, value in recipe.items() if key not in EVAL_KEYS[task]}


def evaluation_part(task: str, recipe: dict) -> dict:
    return {key: value for key, value in recipe.items() if key in EVAL_KEYS[task]}


def check_refinements(task: str, task_config: dict) -> None:
    """Names unique (they name folders), `when` keys known, `set` keys part of the recipe."""
    seen = set()
    recipe_keys = set(task_config) - SCALE_KEYS
    for i, refinement in enumerate(task_config.get("refine", [])):
        where = f"{task}.refine[{i}]"
        name = refinement["name"]
        if name in seen or name == DEFAULT:
            raise ConfigError(f"{where}: name {name!r} is used twice or reserved; each refinement names a results folder")
        seen.add(name)
        check_when(refinement["when"], f"{where}.when")
        if unknown := set(refinement["set"]) - recipe_keys - OPTIONAL_KEYS[task]:
            raise ConfigError(f"{where}.set: {sorted(unknown)[0]!r} is not a key of the {task} recipe; "
                              f"it has: {', '.join(sorted(recipe_keys | OPTIONAL_KEYS[task]))}")


def check_at_paper_size(task: str, task_config: dict) -> None:
    """Each `at_paper_size` entry is a `when` of known keys, as a refinement's."""
    for i, when in enumerate(task_config.get("at_paper_size", [])):
        check_when(when, f"{task}.at_paper_size[{i}]")


def check_when(when: dict, where: str) -> None:
    """A matcher names a cell by MATCH_KEYS only: a misspelt key would match nothing, silently."""
    if not isinstance(when, dict):
        raise ConfigError(f"{where}: expected a mapping of {', '.join(MATCH_KEYS)} to values; got {when!r}")
    if unknown := set(when) - set(MATCH_KEYS):
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r}; allowed: {', '.join(MATCH_KEYS)}")


def snapshot_epochs(epochs: int, count: int) -> list[int]:
    """The epochs whose weights a run keeps for measurements over training: 0 (initialisation) and
    `count` evenly spaced epochs ending at the last, e.g. (200, 4) -> [0, 50, 100, 150, 200];
    none when count is 0."""
    if count <= 0:
        return []
    count = min(count, epochs)  # more snapshots than epochs: every epoch
    return sorted({0, *(round(k * epochs / count) for k in range(1, count + 1))})


def checkpointed_updates(max_updates: int, every: int) -> list[int]:
    """The updates a sequence run checkpoints (a dev loss, and a step<N>.pt where averaging reads
    it): every `every` updates, and the last one."""
    return sorted({*range(every, max_updates + 1, every), max_updates})


def averaged_updates(task: str, recipe: dict) -> list[int]:
    """The updates whose weights a translation or captioning run's evaluation averages: the newest
    `average_last` of its checkpoints. A captioner's self-critical stage continues the numbering
    after its `max_updates` cross-entropy updates (train/captioning.py), so its own checkpoints
    come last."""
    written = checkpointed_updates(recipe["max_updates"], recipe["checkpoint_every"])
    scst = (recipe.get("scst") or {}) if task == "captioning" else {}
    if scst.get("updates"):
        written += [recipe["max_updates"] + step for step in checkpointed_updates(scst["updates"], scst["checkpoint_every"])]
    return written[-recipe["average_last"]:]


# The averaged checkpoints must come from the trained model, as the papers' "last N checkpoints" of
# a long run do (the last 1-10% of 100,000-550,000 updates at paper scale): all after the warm-up,
# whose rising rate leaves the weights far from where training ends, and in the last part of training.
AVERAGED_PART = 0.5


def averaging_problem(task: str, recipe: dict) -> str | None:
    """Why a translation or captioning recipe's averaged checkpoints do not stand for its trained
    model (None when they do): one lies within the warm-up, or before the last AVERAGED_PART of
    its updates (a captioner's self-critical updates counted)."""
    steps = averaged_updates(task, recipe)
    scst = (recipe.get("scst") or {}) if task == "captioning" else {}
    total = recipe["max_updates"] + (scst.get("updates") or 0)
    span = f"average_last {recipe['average_last']} at checkpoint_every {recipe['checkpoint_every']} averages updates {steps[0]}-{steps[-1]}"
    if steps[0] <= recipe["warmup"]:
        return f"{span}, from within the warm-up of {recipe['warmup']} updates"
    if steps[0] <= (1 - AVERAGED_PART) * total:
        return f"{span}, from before the last {AVERAGED_PART:.0%} of the {total} updates"
    return None


# How often a translation or captioning run writes its resume point (last.pt: weights, Adam's two
# moments, random states; 3.4 GB for a big Transformer), in seconds of training: at most this much
# is lost to a crash, while gpu-day's WMT runs checkpoint every 20 updates, every few seconds on a
# GPU, for the step files averaging reads. A time-limit stop and the run's end always write one.
RESUME_EVERY_S = 600.0


def resume_points(checkpoints: int, checkpoint_s: float | None, every_s: float = RESUME_EVERY_S) -> int:
    """How many resume points a run of `checkpoints` checkpoints, `checkpoint_s` seconds apart,
    writes (train/checkpoint.resume_due): one at every ceil(every_s / checkpoint_s)-th checkpoint,
    and at the last; with no time given, one at every checkpoint (an upper bound)."""
    if not checkpoint_s or checkpoint_s <= 0:
        return checkpoints
    apart = max(1, math.ceil(every_s / checkpoint_s))
    return -(-checkpoints // apart)
