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
    mean = RunningMean()
    for state in states:
        mean.add(state)
    return mean.result()


class RunningMean:
    """average_state_dicts one state at a time: only the running sums are held, so averaging the
    last 20 checkpoints of a big Transformer needs the memory of two of them, not of 20."""

    def __init__(self):
        self.n = 0
        self.sums: dict[str, Tensor] = {}
        self.first: dict[str, tuple] = {}  # key -> (shape, dtype) of checkpoint 0

    def add(self, state: dict[str, Tensor]) -> None:
        i = self.n
        for key, value in state.items():
            if not isinstance(value, Tensor):
                raise ValueError(f"{key!r} in checkpoint {i} is a {type(value).__name__}, not a tensor")
        if i == 0:
            self.first = {key: (v.shape, v.dtype) for key, v in state.items()}
            self.sums = {key: _accumulator(v) for key, v in state.items()}
        else:
            self._check(i, state)
            for key, value in state.items():
                self._add_one(i, key, value)
        self.n += 1

    def _check(self, i: int, state: dict[str, Tensor]) -> None:
        missing = [k for k in self.first if k not in state]
        if missing:
            raise ValueError(f"checkpoint {i} is missing key {missing[0]!r} (present in checkpoint 0)"
                             + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
        extra = [k for k in state if k not in self.first]
        if extra:
            raise ValueError(f"checkpoint {i} has extra key {extra[0]!r} (absent from checkpoint 0)"
                             + (f" and {len(extra) - 1} more" if len(extra) > 1 else ""))
        for key, value in state.items():
            shape, dtype = self.first[key]
            if value.shape != shape:
                raise ValueError(f"shape mismatch for {key!r}: checkpoint 0 has {tuple(shape)}, checkpoint {i} has {tuple(value.shape)}")
            if value.dtype != dtype:
                raise ValueError(f"dtype mismatch for {key!r}: checkpoint 0 has {dtype}, checkpoint {i} has {value.dtype}")

    def _add_one(self, i: int, key: str, value: Tensor) -> None:
        total = self.sums[key]
        if value.dtype == torch.bool:
            if not torch.equal(value, total):
                raise ValueError(f"bool tensor {key!r} differs between checkpoint 0 and {i}")
            return
        total += value.to(total.dtype)

    def result(self) -> dict[str, Tensor]:
        """The mean; the sums become it (call once)."""
        if self.n == 0:
            raise ValueError("no state dicts to average")
        out = {}
        for key, total in self.sums.items():
            dtype = self.first[key][1]
            if dtype == torch.bool:
                out[key] = total.clone()
            elif total.is_floating_point() or total.is_complex():
                out[key] = total.div_(self.n).to(dtype)  # in place: no third copy of a big model
            else:  # integers: floor division as fairseq's `//=`
                out[key] = torch.div(total, self.n, rounding_mode="floor").to(dtype)
        return out


def _accumulator(value: Tensor) -> Tensor:
    """A new tensor to sum into: float16/bfloat16 in float32, integers in int64, others as they are."""
    if value.dtype == torch.bool:
        return value.clone()
    if value.is_floating_point() or value.is_complex():
        return value.to(torch.float32 if value.dtype in _LOW_PRECISION else value.dtype, copy=True)
    return value.to(torch.int64, copy=True)


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
    mean = RunningMean()
    for path in paths:  # one checkpoint in memory at a time, beside the sums
        ckpt = _load(path)
        if run_id is not None and ckpt.get("run_id") != run_id:
            raise ValueError(f"{path} was written by another training run (run id {ckpt.get('run_id')}, not {run_id}): "
                             "its weights are not this run's; retrain the run (delete its folder) to average it")
        try:
            mean.add(ckpt["model"])
        except ValueError as e:
            names = ", ".join(f"{i}={p.name}" for i, p in enumerate(paths))
            raise ValueError(f"{e} (checkpoints: {names})") from None
        newest = {k: v for k, v in ckpt.items() if k != "model"}
        del ckpt

    result = {k: v for k, v in newest.items() if k not in DROPPED_KEYS}
    result["model"] = mean.result()
    result["averaged_from"] = [p.name for p in paths]
    files.save_torch(out, result)
    return {"files": result["averaged_from"], "n": len(paths), "step": result.get("step"), "out": str(out)}
