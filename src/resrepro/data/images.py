"""Prepared image datasets, normalization and augmentation, shared by CIFAR and digits.

PREPARED FORMAT: one torch .pt file holding a dict
    train_x  uint8 (N, C, H, W)     test_x  uint8 (M, C, H, W)
    train_y  int64 (N,)             test_y  int64 (M,)
    classes  list[str]              class names, indexed by label
    mean     list[float]            per channel, of train_x / 255
    std      list[float]            per channel (population std), of train_x / 255
    name     str                    dataset name, e.g. "cifar10"
    source   str                    where the images came from
Why: the whole of CIFAR fits in memory as uint8 (180 MB), so training indexes one tensor on
the device instead of running a DataLoader; only plain tensors, lists and strings are stored,
so it loads with torch.load(weights_only=True) and never unpickles code.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

REQUIRED_KEYS = ("train_x", "train_y", "test_x", "test_y", "classes", "mean", "std", "name", "source")


def channel_stats(x: Tensor) -> tuple[list[float], list[float]]:
    """Per-channel mean and population std of uint8 images (N, C, H, W), scaled to [0, 1]."""
    x = x.double().div_(255.0)  # float64: sums over 50k x 1024 pixels
    mean = x.mean(dim=(0, 2, 3))
    std = x.std(dim=(0, 2, 3), correction=0)
    return [float(v) for v in mean], [float(v) for v in std]


def save_prepared(
    out: str | Path,
    *,
    train_x: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    test_y: Tensor,
    classes: Sequence[str],
    name: str,
    source: str,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
) -> None:
    """Check the fields and write them atomically to `out`; mean/std default to channel_stats."""
    _check_split("train", train_x, train_y, len(classes))
    _check_split("test", test_x, test_y, len(classes))
    if mean is None or std is None:
        mean, std = channel_stats(train_x)
    data = {
        "train_x": train_x.contiguous(),
        "train_y": train_y.contiguous(),
        "test_x": test_x.contiguous(),
        "test_y": test_y.contiguous(),
        "classes": [str(c) for c in classes],
        "mean": [float(v) for v in mean],
        "std": [float(v) for v in std],
        "name": str(name),
        "source": str(source),
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(data, tmp)
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _check_split(split: str, x: Tensor, y: Tensor, n_classes: int) -> None:
    if x.dtype != torch.uint8 or x.dim() != 4:
        raise ValueError(f"{split}_x must be uint8 (N, C, H, W), got {x.dtype} {tuple(x.shape)}")
    if y.dtype != torch.int64 or y.shape != (x.shape[0],):
        raise ValueError(f"{split}_y must be int64 ({x.shape[0]},), got {y.dtype} {tuple(y.shape)}")
    if len(y) and (y.min() < 0 or y.max() >= n_classes):
        raise ValueError(f"{split}_y has labels outside 0..{n_classes - 1}")


def prepared_sizes(folder: str | Path) -> dict[str, tuple[int, int]]:
    """(training, test) images of each prepared dataset in `folder` (<name>.pt, `save_prepared`)."""
    return {path.stem: (len(data["train_y"]), len(data["test_y"])) for path in sorted(Path(folder).glob("*.pt"))
            for data in [load_prepared(path)]}


def load_prepared(path: str | Path) -> dict:
    """Load a prepared dataset; ValueError naming the file if it is unreadable or incomplete."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # missing, truncated, not a torch file, or holds code objects
        raise ValueError(f"{path}: cannot read prepared dataset ({err})") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a prepared dataset (a {type(data).__name__}, not a dict)")
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if missing:
        raise ValueError(f"{path}: prepared dataset lacks {', '.join(missing)}; prepare it again")
    return data


def normalize(x: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """(x / 255 - mean) / std per channel, as float32 on x's device; x is uint8 (..., C, H, W)."""
    mean_t = torch.tensor(mean, dtype=torch.float32, device=x.device).view(-1, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32, device=x.device).view(-1, 1, 1)
    return (x.float() / 255.0 - mean_t) / std_t


def augment_batch(x: Tensor, pad: int, flip: bool, generator: torch.Generator) -> Tensor:
    """Random crop after zero-padding `pad` pixels, then random horizontal flip, per example.

    x is float (N, C, H, W). All random numbers are drawn on the CPU from `generator` (in this
    order: row offsets, column offsets, flip coins: `augment_draws`), so a run is the same on any
    device and resumes exactly from a saved generator state. Vectorized: one pad, one gather.
    """
    draws = augment_draws(len(x), pad, flip, generator)
    return shifted(x, pad, *(None if d is None else d.to(x.device) for d in draws))


def augment_draws(n: int, pad: int, flip: bool, generator: torch.Generator) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """The random numbers `augment_batch` draws for n examples, in its order: row offsets and
    column offsets (N, 1) in [0, 2 pad] (None without padding), flip coins (N, 1) (None without flips)."""
    dy = torch.randint(0, 2 * pad + 1, (n, 1), generator=generator) if pad > 0 else None
    dx = torch.randint(0, 2 * pad + 1, (n, 1), generator=generator) if pad > 0 else None
    mirrored = torch.rand(n, 1, generator=generator) < 0.5 if flip else None
    return dy, dx, mirrored


def shifted(x: Tensor, pad: int, dy: Tensor | None, dx: Tensor | None, mirrored: Tensor | None) -> Tensor:
    """x (N, C, H, W) zero-padded by `pad`, cropped at offsets (dy, dx) and mirrored where
    `mirrored`: `augment_batch` with its draws given, on x's device."""
    n, c, h, w = x.shape
    if dy is None and mirrored is None:
        return x
    rows = torch.arange(h, device=x.device).expand(n, h)  # (N, H): source row of each output row
    cols = torch.arange(w, device=x.device).expand(n, w)  # (N, W): source column of each output column
    if dy is not None:
        rows, cols = rows + dy, cols + dx
        x = F.pad(x, (pad, pad, pad, pad))  # zeros: the shifted-in border
    if mirrored is not None:
        cols = torch.where(mirrored, cols.flip(1), cols)
    batch = torch.arange(n, device=x.device).view(n, 1, 1, 1)
    channel = torch.arange(c, device=x.device).view(1, c, 1, 1)
    return x[batch, channel, rows.view(n, 1, h, 1), cols.view(n, 1, 1, w)]


def iterate_batches(n: int, batch_size: int, generator: torch.Generator) -> list[Tensor]:
    """One epoch of shuffled index batches over range(n); the last batch may be smaller."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return list(torch.randperm(n, generator=generator).split(batch_size))


def epoch_batches(n: int, batch_size: int, pad: int, flip: bool, generator: torch.Generator,
                  device: torch.device) -> list[tuple[Tensor, Tensor | None, Tensor | None, Tensor | None]]:
    """One epoch's index batches (`iterate_batches`) and each batch's augmentation draws
    (`augment_draws`), drawn from `generator` in the order a loop drawing batch by batch would draw
    them, and sent to `device` in one copy: a copy from pageable host memory waits for the device,
    so three copies a step would be three host syncs. -> per batch (idx, dy, dx, mirrored)."""
    batches = iterate_batches(n, batch_size, generator)
    draws = [augment_draws(len(idx), pad, flip, generator) for idx in batches]
    columns = [torch.cat(batches).view(-1, 1)] + [torch.cat(d).long() for d in zip(*draws) if d[0] is not None]
    packed = torch.cat(columns, dim=1)  # (n, 1 + the draws present): indices, then dy, dx, coins
    if device.type == "cuda":
        packed = packed.pin_memory()
    out = []
    for part in packed.to(device, non_blocking=True).split([len(idx) for idx in batches]):
        fields = iter(part.unbind(1))
        idx = next(fields)
        dy, dx = (next(fields)[:, None], next(fields)[:, None]) if pad > 0 else (None, None)
        mirrored = next(fields)[:, None].bool() if flip else None
        out.append((idx, dy, dx, mirrored))
    return out


__all__ = [
    "REQUIRED_KEYS", "augment_batch", "augment_draws", "channel_stats", "epoch_batches", "iterate_batches", "load_prepared",
    "normalize", "save_prepared", "shifted",
]
