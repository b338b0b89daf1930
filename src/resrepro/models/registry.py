"""Architectures by name: the one place that builds a model, like residual.py for the variants.

A table row names an architecture (`arch:`, else its task's default) and a size (`depth:` for
the ResNets, `size:` for the Transformers). A model spec (specs.ModelSpec) holds the registered
name, the size, the variant and its args, and what only the data knows (classes, input channels,
vocabulary size). Training writes it into every checkpoint as its dict (`model_spec`), so that
evaluation and measurement jobs rebuild the model from the checkpoint alone (`from_checkpoint`).

A new architecture is its entry in catalog.ARCHITECTURES (task, size key, folder name, what its
model spec reads: declared without torch, for the workflow's parse) and one builder registered
here with `@register(name)`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from ..catalog import ARCHITECTURES, DEFAULT_FOR_TASK, Architecture  # noqa: F401  (what each builder builds)
from ..catalog import architecture as get
from ..specs import MISSING, ModelSpec, TrainSpec
from ..speed import default_dtype

BUILDERS: dict[str, Callable[[ModelSpec], nn.Module]] = {}


def register(name: str):
    """The builder of an architecture declared in catalog.ARCHITECTURES."""

    def decorator(build: Callable[[ModelSpec], nn.Module]):
        if name not in ARCHITECTURES:
            raise ValueError(f"architecture {name!r}: declare it in catalog.ARCHITECTURES first")
        if name in BUILDERS:
            raise ValueError(f"architecture {name!r} is registered twice")
        BUILDERS[name] = build
        return build

    return decorator


def model_spec(run_spec: TrainSpec | Mapping, **from_data) -> ModelSpec:
    """The model spec of a run: its architecture, what the architecture reads of the run's training
    spec, and what only the data knows (e.g. classes=10, in_channels=3; vocab_size=32768)."""
    arch = get(run_spec.get("model"))
    given = {key: run_spec.get(key, MISSING) for key in arch.run_keys}
    return ModelSpec.from_dict({"arch": arch.name, **{key: value for key, value in given.items() if value is not MISSING}, **from_data})


def build(spec: ModelSpec | Mapping) -> nn.Module:
    """The model a spec names (a checkpoint's dict parsed first)."""
    spec = ModelSpec.of(spec)
    return BUILDERS[get(spec.arch).name](spec)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def parameters_of(spec: ModelSpec | Mapping) -> int:
    """Parameters of the model a spec names, built on the meta device: no memory, any size."""
    with torch.device("meta"), _initializers_skipped():
        return count_parameters(build(spec))


@contextlib.contextmanager
def _initializers_skipped():
    """torch.nn.init's initializers as no-ops, for a count that needs shapes, not values: on the
    meta device an initializer runs torch's Python reference code (a quarter of a second for a
    ResNet-110, in the report's serial tail)."""
    names = [name for name in dir(nn.init) if name.endswith("_") and not name.startswith("_")]
    saved = {name: getattr(nn.init, name) for name in names}
    try:
        for name in names:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, initializer in saved.items():
            setattr(nn.init, name, initializer)


def load_checkpoint(path) -> dict:
    """A checkpoint's entries on the CPU (tensors only: weights_only)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a truncated or foreign file: say which, not a deep torch traceback
        raise RuntimeError(f"checkpoint {path} is unreadable ({type(err).__name__}: {err}); delete it to start this run over") from None


def from_checkpoint(ckpt: dict, weights: str = "model") -> nn.Module:
    """The model a checkpoint holds (its `model_spec`), with its weights loaded, on the CPU, in the
    dtype it was trained in (a float64 run is not measured in float32)."""
    state = ckpt[weights]
    with default_dtype(next((t.dtype for t in state.values() if t.is_floating_point()), torch.float32)):
        model = build(ckpt["model_spec"])
    model.load_state_dict(state)
    return model


def snapshot_path(run_dir, epoch: int) -> Path:
    """Where a run keeps its weights after `epoch` epochs (train/checkpoint.py writes them)."""
    return Path(run_dir) / "checkpoints" / f"epoch{epoch:04d}.pt"


def first_step_path(run_dir) -> Path:
    """Where a run that keeps snapshots keeps its weights after its first SGD step: paper 002
    measures dominant gradient flow "after the first ... iteration of training"."""
    return Path(run_dir) / "checkpoints" / "step0001.pt"


def snapshots(run_dir) -> list[tuple[int, Path]]:
    """(epoch, path) of every snapshot a run kept, by epoch."""
    found = (Path(run_dir) / "checkpoints").glob("epoch[0-9][0-9][0-9][0-9].pt")
    return sorted((int(p.stem.removeprefix("epoch")), p) for p in found)
