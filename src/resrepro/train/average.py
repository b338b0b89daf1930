"""Checkpoint averaging for the translation track.

The translation papers we reproduce evaluate "a single model obtained by averaging the last 10
checkpoints". tensor2tensor writes a checkpoint every 1,000 steps, so "the last 10" spans
roughly the final 10k training steps (at mini scale a run may have fewer; we average what exists).
Averaging the weights of nearby points on the trajectory smooths out the last updates' noise and
is worth a fraction of a BLEU point for free; leaving it out makes our numbers incomparable.

Semantics follow fairseq's `scripts/average_checkpoints.py` (docs/facts.md): all checkpoints must hold
exactly the same parameter names and shapes; floating tensors are summed and divided by N, with
half/bfloat16 upcast to float32 for the arithmetic (then cast back, unlike fairseq, so the
averaged file has the same dtypes as its inputs); integer tensors (step counters,
`num_batches_tracked`) are summed and floor-divided; state other than the model is copied from
the newest checkpoint. Optimizer state is dropped: the averaged model is for evaluation, and
resuming training from it with the newest checkpoint's moments would be wrong anyway.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import torch
from torch import Tensor

from .. import files

# Entries of a training checkpoint that only make sense for continuing training the model they
# were saved with; an averaged model is a different model, so they are not carried over.
DROPPED_KEYS = ("optimizer", "scheduler", "lr_scheduler", "scaler")

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def average_state_dicts(states: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Element-wise mean of state dicts with identical keys, shapes and dtypes.

    Floating tensors: sum / N (float16/bfloat16 computed in float32, returned in their own dtype).
    Integer tensors: floor(sum / N), summed in int64 so small integer types cannot overflow.
    Bool tensors have no mean: they must be equal in every state and are copied.
    The result holds new tensors in the key order of the first state; inputs are not modified.
    """
    if not states:
        raise ValueError("no state dicts to average")
    _check_keys(states)
    n = len(states)
    out: dict[str, Tensor] = {}
    for key, first in states[0].items():
        values = [s[key] for s in states]
        for i, v in enumerate(values):
            if not isinstance(v, Tensor):
                raise ValueError(f"{key!r} in checkpoint {i} is a {type(v).__name__}, not a tensor")
            if v.shape != first.shape:
                raise ValueError(
                    f"shape mismatch for {key!r}: checkpoint 0 has {tuple(first.shape)}, "
                    f"checkpoint {i} has {tuple(v.shape)}"
                )
            if v.dtype != first.dtype:
                raise ValueError(
                    f"dtype mismatch for {key!r}: checkpoint 0 has {first.dtype}, "
                    f"checkpoint {i} has {v.dtype}"
                )
        out[key] = _average_one(key, values, n)
    return out


def _check_keys(states: list[dict[str, Tensor]]) -> None:
    reference = list(states[0].keys())
    ref_set = set(reference)
    for i, state in enumerate(states[1:], start=1):
        keys = set(state.keys())
        missing = [k for k in reference if k not in keys]
        if missing:
            raise ValueError(
                f"checkpoint {i} is missing key {missing[0]!r} (present in checkpoint 0)"
                + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
            )
        extra = [k for k in state.keys() if k not in ref_set]
        if extra:
            raise ValueError(
                f"checkpoint {i} has extra key {extra[0]!r} (absent from checkpoint 0)"
                + (f" and {len(extra) - 1} more" if len(extra) > 1 else "")
            )


def _average_one(key: str, values: list[Tensor], n: int) -> Tensor:
    dtype = values[0].dtype
    if dtype == torch.bool:
        for i, v in enumerate(values[1:], start=1):
            if not torch.equal(v, values[0]):
                raise ValueError(f"bool tensor {key!r} differs between checkpoint 0 and {i}")
        return values[0].clone()
    if values[0].is_floating_point() or values[0].is_complex():
        acc_dtype = torch.float32 if dtype in _LOW_PRECISION else dtype
        total = values[0].to(acc_dtype, copy=True)
        for v in values[1:]:
            total += v.to(acc_dtype)
        return (total / n).to(dtype)
    # integers: sum in int64, floor division as fairseq's `//=`
    total = values[0].to(torch.int64, copy=True)
    for v in values[1:]:
        total += v.to(torch.int64)
    return torch.div(total, n, rounding_mode="floor").to(dtype)


_DIGITS = re.compile(r"\d+")


def step_of(path: str | Path) -> int | None:
    """The step number in a checkpoint file name (the last run of digits): step9000.pt -> 9000."""
    found = _DIGITS.findall(Path(path).name.split(".")[0])
    return int(found[-1]) if found else None


def checkpoints_to_average(folder: Path, n: int, pattern: str = "step*.pt") -> list[Path]:
    """The `n` newest checkpoints in `folder`, by the step number in their names, oldest first.

    Sorted numerically (step10000 after step9000), never lexically or by mtime. Files matching
    `pattern` without a number in their name (e.g. an averaged output) are ignored. Fewer than
    `n` is allowed (a short mini-scale run) and reported on stderr; none is an error.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    folder = Path(folder)
    numbered = [(step_of(p), p.name, p) for p in folder.glob(pattern) if p.is_file()]
    numbered = sorted((s, name, p) for s, name, p in numbered if s is not None)
    if not numbered:
        raise ValueError(f"no checkpoints matching {pattern!r} with a step number in {folder}")
    if len(numbered) < n:
        print(
            f"checkpoints_to_average: only {len(numbered)} checkpoint(s) in {folder}, "
            f"fewer than the {n} asked for; averaging all of them",
            file=sys.stderr,
        )
    return [p for _, _, p in numbered[-n:]]


def _load(path: Path, mmap: bool = False) -> dict:
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:  # noqa: BLE001 - any failure is "this file is not a usable checkpoint"
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise RuntimeError(f"cannot load checkpoint {path}: {type(e).__name__}: {reason}") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict):
        raise RuntimeError(f"{path} is not a training checkpoint (no 'model' state dict)")
    return ckpt


def run_id_of(resume_point: Path) -> str | None:
    """The id of the training run that wrote a resume point (last.pt); None when it has none."""
    return _load(resume_point, mmap=True).get("run_id")


def average_checkpoints(paths: list[Path], out: Path, run_id: str | None = None) -> dict:
    """Average the models of the checkpoints at `paths`, oldest first (as checkpoints_to_average
    returns them), and write them to `out` atomically. With `run_id`, each checkpoint must have
    been written by that training run: a step left by an earlier run in the same folder is refused.

    The output holds {"model": the averaged state dict, "averaged_from": [file names]} plus the
    newest (last) checkpoint's other entries, its "step" included, minus optimizer state
    (DROPPED_KEYS). Returns {"files", "n", "step", "out"}.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("no checkpoints to average")
    ckpts = [_load(p) for p in paths]
    if run_id is not None:
        for path, ckpt in zip(paths, ckpts):
            if ckpt.get("run_id") != run_id:
                raise ValueError(f"{path} was written by another training run (run id {ckpt.get('run_id')}, not {run_id}): "
                                 "its weights are not this run's; retrain the run (delete its folder) to average it")
    try:
        model = average_state_dicts([c["model"] for c in ckpts])
    except ValueError as e:
        names = ", ".join(f"{i}={p.name}" for i, p in enumerate(paths))
        raise ValueError(f"{e} (checkpoints: {names})") from None

    result = {k: v for k, v in ckpts[-1].items() if k not in DROPPED_KEYS}
    result["model"] = model
    result["averaged_from"] = [p.name for p in paths]
    files.save_torch(out, result)
    return {"files": result["averaged_from"], "n": len(paths), "step": result.get("step"), "out": str(out)}
