"""Atomic writes: a killed job leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """Call `write(tmp)` on a temp file next to `path`, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json(path: str | Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def save_torch(path: str | Path, obj) -> None:
    import torch  # here, so that the jobs that write no tensors never import it

    atomic_write(path, lambda tmp: torch.save(obj, tmp))


def save_numpy(path: str | Path, array) -> None:
    """An .npy file (through a file object: np.save would append .npy to the temp file's name)."""
    import numpy as np

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.save(f, array)

    atomic_write(path, write)
