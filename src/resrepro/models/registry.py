"""Architectures by name: the one place that builds a model, like residual.py for the variants.

A table row names an architecture (`arch:`, else its task's default) and a size (`depth:` for
the ResNets, `size:` for the Transformers). A model spec is a flat dict:
`{"arch": <registered name>, <the size key>: ..., "variant", "args", ...}` plus what only the data
knows (classes, input channels, vocabulary size). Training writes it into every checkpoint
(`model_spec`), so that evaluation and measurement jobs rebuild the model from the checkpoint
alone (`from_checkpoint`).

A new architecture is one builder registered here with `@register(...)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..residual import ConfigError


@dataclass(frozen=True)
class Architecture:
    name: str
    task: str  # classification or translation: which tables may name it
    size_key: str  # the table row's key that picks the size: depth, size
    run_name: str  # the run's arch folder from the scale's size, e.g. "preact_resnet{}" -> preact_resnet110
    run_keys: tuple[str, ...]  # what a model spec copies from the run's training spec (optional if absent)
    build: Callable[[dict], nn.Module]


ARCHITECTURES: dict[str, Architecture] = {}
DEFAULT_FOR_TASK: dict[str, str] = {}


def register(name: str, task: str, size_key: str, run_name: str, run_keys: tuple[str, ...], default: bool = False):
    def decorator(build: Callable[[dict], nn.Module]):
        if name in ARCHITECTURES:
            raise ValueError(f"architecture {name!r} is registered twice")
        ARCHITECTURES[name] = Architecture(name, task, size_key, run_name, run_keys, build)
        if default:
            DEFAULT_FOR_TASK[task] = name
        return build

    return decorator


def get(name: str, task: str | None = None) -> Architecture:
    allowed = [a for a, arch in ARCHITECTURES.items() if task is None or arch.task == task]
    if name not in allowed:
        raise ConfigError(f"architecture {name!r} unknown{f' for {task}' if task else ''}; allowed: {', '.join(allowed)}")
    return ARCHITECTURES[name]


def model_spec(run_spec: dict, **from_data) -> dict:
    """The model spec of a run: its architecture, what the architecture reads of the run's training
    spec, and what only the data knows (e.g. classes=10, in_channels=3; vocab_size=32768)."""
    arch = get(run_spec["model"])
    return {"arch": arch.name, **{k: run_spec[k] for k in arch.run_keys if k in run_spec}, **from_data}


def build(spec: dict) -> nn.Module:
    return get(spec["arch"]).build(spec)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def parameters_of(spec: dict) -> int:
    """Parameters of the model a spec names, built on the meta device: no memory, any size."""
    with torch.device("meta"):
        return count_parameters(build(spec))


def load_checkpoint(path) -> dict:
    """A checkpoint's entries on the CPU (tensors only: weights_only)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a truncated or foreign file: say which, not a deep torch traceback
        raise RuntimeError(f"checkpoint {path} is unreadable ({type(err).__name__}: {err}); delete it to start this run over") from None


def from_checkpoint(ckpt: dict, weights: str = "model") -> nn.Module:
    """The model a checkpoint holds (its `model_spec`), with its weights loaded, on the CPU."""
    model = build(ckpt["model_spec"])
    model.load_state_dict(ckpt[weights])
    return model
