"""What a job is started with, typed: the training spec of each task, its captioning runs'
self-critical stage, the evaluation spec, and the model spec every checkpoint carries; and a
table row as the analysis reads it.

A spec is built at plan time (experiments.job_train_spec, experiments.eval_spec), travels as JSON
(the rule's params, so that changing one value reruns exactly the jobs that read it, and the job's
`--spec`), and is parsed back by the job (jobs.py). Every key a recipe may leave out is MISSING
when left out, and then absent from the JSON: the job's params stay byte for byte what they were,
and the consumer's default applies (`spec.get("lr_decay", 0.1)`). None is a value, not an absence
(a variant's `args: null`).

Names say which is which: in a training spec `arch_dir` is the run's architecture folder (e.g.
preact_resnet110, written as the JSON key "arch") and `model` the architecture's catalog name (e.g.
preact_resnet), which a model spec calls `arch`, as its checkpoints always have.
Torch-free: the workflow builds these while Snakemake parses.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()  # a key the recipe left out: absent from the JSON, the consumer's default applies


def optional(**metadata) -> Any:
    return dataclasses.field(default=MISSING, metadata=metadata)


def json_key(key: str, **metadata) -> Any:
    """A field written under another JSON key (e.g. arch_dir as "arch")."""
    return dataclasses.field(metadata={"key": key, **metadata})


class SpecError(ValueError):
    """A spec's JSON does not have this spec's keys: a job started by hand with a wrong --spec."""


S = TypeVar("S", bound="Spec")


class Spec:
    """to_dict/from_dict by the dataclass's fields: a field's JSON key is its name unless its
    metadata says (`json_key`); a field whose metadata names a `spec` class nests that spec."""

    def to_dict(self) -> dict:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is MISSING:
                continue
            out[f.metadata.get("key", f.name)] = value.to_dict() if isinstance(value, Spec) else value
        return out

    def to_json(self) -> str:
        """The spec as the rule's params and the job's --spec: sorted keys, so the same spec is the same text."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls: type[S], values: Mapping) -> S:
        """The spec of these JSON keys, values as they are (no coercion): a key this spec does not
        have, or a required one absent, is an error naming it."""
        by_key = {f.metadata.get("key", f.name): f for f in dataclasses.fields(cls)}
        if unknown := sorted(set(values) - set(by_key)):
            raise SpecError(f"{cls.__name__}: unknown key {unknown[0]!r}; its keys: {', '.join(sorted(by_key))}")
        kwargs = {}
        for key, f in by_key.items():
            if key not in values:
                if f.default is dataclasses.MISSING:
                    raise SpecError(f"{cls.__name__}: key {key!r} is required")
                continue
            value = values[key]
            nested = f.metadata.get("spec")
            kwargs[f.name] = nested.from_dict(value) if nested and isinstance(value, Mapping) else value
        return cls(**kwargs)

    @classmethod
    def from_json(cls: type[S], text: str) -> S:
        return cls.from_dict(json.loads(text))

    @classmethod
    def of(cls: type[S], values: S | Mapping) -> S:
        """This spec as it is, or parsed from its JSON's dict (tests, benchmarks, a checkpoint's model spec)."""
        return values if isinstance(values, cls) else cls.from_dict(values)

    def get(self, name: str, default: Any = None) -> Any:
        """A field's value, or `default` where the recipe left it out (or this task's spec has no
        such field: a switch one task's recipe has and another's not, e.g. dtype)."""
        value = getattr(self, name, MISSING)
        return default if value is MISSING else value

    def need(self, name: str) -> Any:
        """A field this use of the spec cannot do without (e.g. a classifier's `classes`): an error naming it where absent."""
        value = getattr(self, name, MISSING)
        if value is MISSING:
            raise SpecError(f"{type(self).__name__}: {name!r} is required here; the spec has {', '.join(sorted(self.to_dict()))}")
        return value

    def replace(self: S, **changes) -> S:
        return dataclasses.replace(self, **changes)


def spec_class(cls):
    """A spec's dataclass: frozen (a spec is a value) and keyword-only (required fields may follow optional ones)."""
    return dataclasses.dataclass(frozen=True, kw_only=True)(cls)


@spec_class
class TrainSpec(Spec):
    """What every task's training reads. `seed` is MISSING in a job's spec, which all its seeds share
    (the job gives each run its own: `spec.replace(seed=N)`)."""

    task: str
    dataset: str  # the dataset this scale runs, e.g. digits for the paper's cifar10 at mini
    arch_dir: str = json_key("arch")  # the run's architecture folder, e.g. preact_resnet110, transformer_base
    model: str  # the architecture (catalog.ARCHITECTURES), e.g. preact_resnet, transformer
    variant: str  # the residual variant (catalog.VARIANTS), e.g. xskip_ln
    args: dict | None  # the variant's arguments as the table gives them
    seed: int = optional()
    deterministic: bool | str = optional()  # torch's deterministic kernels (default off)
    # speed switches (speed.DEFAULTS): what a recipe leaves out takes speed.py's default
    amp: str = optional()  # auto, bf16 or fp32
    channels_last: str | bool = optional()  # auto, true or false, as fused_optimizer and tf32
    compile: str | bool = optional()  # auto, false, true (inductor) or a backend's name
    fused_optimizer: str | bool = optional()
    tf32: str | bool = optional()

    task_name: ClassVar[str] = ""

    def __post_init__(self):
        if self.task_name and self.task != self.task_name:
            raise SpecError(f"{type(self).__name__}: task {self.task!r}, not {self.task_name!r}")

    @classmethod
    def from_dict(cls, values: Mapping) -> TrainSpec:
        """As Spec.from_dict; TrainSpec itself gives the spec of the dict's task (`values["task"]`)."""
        if cls is not TrainSpec:
            return super().from_dict(values)
        if values.get("task") not in TRAIN_SPECS:
            raise SpecError(f"a training spec's task is one of {', '.join(TRAIN_SPECS)}; got {values.get('task')!r}")
        return TRAIN_SPECS[values["task"]].from_dict(values)


@spec_class
class ClassificationTrainSpec(TrainSpec):
    task_name: ClassVar[str] = "classification"
    depth: int = optional()  # the size key of preact_resnet, simple_net, resnet_cifar (catalog.Architecture.size_key)
    size: int | str = optional()  # the size key of paper 003's nets: "paper", "110", ...
    epochs: int
    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    lr_milestones: list[int]
    lr_decay: float | list[float] = optional()  # one factor, or one per milestone (default 0.1)
    warmup_lr: float
    warmup_iterations: int
    warmup_min_depth: int
    augment_pad: int
    augment_flip: bool
    snapshots: int = optional()  # weights kept at evenly spaced epochs (default none)
    init: str = optional()  # the architecture's initialisation (its default where absent)
    dtype: str = optional()  # float32 (default) or float64


@spec_class
class ScstSpec(Spec):
    """Self-critical training on CIDEr-D after the cross-entropy updates (Rennie et al. 2017)."""

    updates: int
    lr: float
    batch_images: int
    checkpoint_every: int
    max_len: int


@spec_class
class SequenceTrainSpec(TrainSpec):
    """What translation and captioning training share: a Transformer trained by updates."""

    size: str  # the size preset, e.g. base, big, mini_base
    update_freq: int
    max_updates: int
    warmup: int
    lr_scale: float
    label_smoothing: float
    checkpoint_every: int
    keep_checkpoints: int
    world_size: int  # the GPUs it trains on: each rank takes a batch, so it is part of the recipe
    pad_id: int
    bos_id: int
    eos_id: int
    dropout: float = optional()  # default: the size preset's
    max_train_len: int = optional()  # default: catalog.MAX_POSITIONS


@spec_class
class TranslationTrainSpec(SequenceTrainSpec):
    task_name: ClassVar[str] = "translation"
    max_tokens: int
    length_bucket: int = optional()  # default 0: batches as long as their longest sentence
    dev_sentences: int = optional()  # default: the whole dev split


@spec_class
class CaptioningTrainSpec(SequenceTrainSpec):
    task_name: ClassVar[str] = "captioning"
    batch_size: int
    scst: ScstSpec | None = optional(spec=ScstSpec)  # absent or None: cross-entropy only


TRAIN_SPECS: dict[str, type[TrainSpec]] = {cls.task_name: cls for cls in (ClassificationTrainSpec, TranslationTrainSpec, CaptioningTrainSpec)}


@spec_class
class EvalSpec(Spec):
    """What evaluating a trained translation or captioning run reads: the model's identity and the
    evaluation settings (recipes.EVAL_KEYS). Changing it re-evaluates, never retrains."""

    model: str
    size: str
    variant: str
    args: dict | None
    pad_id: int
    bos_id: int
    eos_id: int
    average_last: int  # the newest checkpoints averaged into the evaluated weights
    beam: int
    alpha: float  # length penalty ((5 + len) / 6) ** alpha
    max_len_a: float = optional()  # translation: at most a * source length + b tokens
    max_len_b: int
    test_sentences: int = optional()  # translation: the first N test sentences (default: all)


@spec_class
class ModelSpec(Spec):
    """What builds a model (models/registry.py): its architecture, what that reads of the run's
    training spec (catalog.Architecture.run_keys) and what only the data knows. Every checkpoint
    carries it as its dict, so a job that reads the file rebuilds the model from it alone."""

    arch: str  # the catalog's architecture, e.g. preact_resnet (a training spec's `model`, not its folder)
    depth: int = optional()  # or `size`: the architecture's size key
    size: int | str = optional()
    variant: str
    args: dict | None = optional()
    init: str = optional()  # the architecture's initialisation (its default where absent)
    pad_id: int = optional()
    dropout: float = optional()  # the Transformers': default the size preset's
    # what only the data knows
    classes: int = optional()
    in_channels: int = optional()  # default 3
    image_size: int = optional()
    vocab_size: int = optional()
    feature_dim: int = optional()  # the captioner's image features


@spec_class
class TableRow(Spec):
    """A row of a paper's table as config/tables gives it (workflow/schemas/tables.schema.yaml's
    `row`, which checks its values), or an extra row (experiments.extra_row: `new`). The paper's
    dataset and size, not what a scale runs."""

    label: str
    formula: str = optional()
    dataset: str
    arch: str = optional()  # the catalog's architecture; absent: the task's default
    depth: int = optional()  # or `size`: the architecture's size key
    size: int | str = optional()
    variant: str
    args: dict | None = optional()
    paper: float | None  # None: our copy of the paper lost the number (its note says so)
    baseline: str | None = optional()  # the row it is compared with; absent: the table's
    note: str = optional()
    paper_parameters: int = optional()  # what the paper prints beside the row
    paper_train_error: float = optional()
    metric: str = optional()  # absent: the table's
    claim: str = optional()  # direction (default) or same
    quantity: str = optional()  # a value the table's measurement computes, `at` init or final
    at: str = optional()
    series: str = optional()  # the depth study's line and its `layers` (a table with `plot: layers`)
    layers: int = optional()
    new: bool = optional()  # an extra row: no paper reports it
