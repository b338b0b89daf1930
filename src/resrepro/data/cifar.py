"""CIFAR-10 and CIFAR-100 from the official "python version" archives.

The archives hold Python 2 pickles of dicts with bytes keys: b"data" is uint8 (N, 3072), one
image per row as 1024 red, 1024 green, then 1024 blue values, each plane row-major 32 x 32, so
a reshape to (N, 3, 32, 32) is the (N, C, H, W) layout. They are read straight from the
.tar.gz and written in the PREPARED FORMAT (see resrepro.data.images).
"""

from __future__ import annotations

import pickle
import tarfile
from pathlib import Path

import numpy as np
import torch

from resrepro.data.images import save_prepared

# md5 of the archives, as recorded in torchvision/datasets/cifar.py (tgz_md5) and
# https://www.cs.toronto.edu/~kriz/cifar.html
SOURCES = {
    "cifar10": {
        "url": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "md5": "c58f30108f718f92721af3b95e74349a",
        "filename": "cifar-10-python.tar.gz",
    },
    "cifar100": {
        "url": "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        "md5": "eb9058c3a382ffc7106e4002c42a8d85",
        "filename": "cifar-100-python.tar.gz",
    },
}

# Where each archive keeps its batches and which keys hold the labels and their names.
# CIFAR-100 uses its 100 fine labels, as the papers do.
LAYOUT = {
    "cifar10": {
        "folder": "cifar-10-batches-py",
        "train": [f"data_batch_{i}" for i in range(1, 6)],
        "test": ["test_batch"],
        "meta": "batches.meta",
        "names_key": b"label_names",
        "labels_key": b"labels",
    },
    "cifar100": {
        "folder": "cifar-100-python",
        "train": ["train"],
        "test": ["test"],
        "meta": "meta",
        "names_key": b"fine_label_names",
        "labels_key": b"fine_labels",
    },
}

# Label counts (CIFAR-100: its fine labels), for counting a model's parameters at paper scale
# without the data (analysis/aggregate.py).
CLASSES = {"cifar10": 10, "cifar100": 100}


def prepare_cifar(archive: str | Path, name: str, out: str | Path) -> None:
    """Read the CIFAR archive `archive` (name "cifar10" or "cifar100") and write `out`."""
    if name not in LAYOUT:
        raise ValueError(f"unknown CIFAR dataset {name!r}; allowed: {', '.join(LAYOUT)}")
    layout = LAYOUT[name]
    with tarfile.open(archive, "r:gz") as tar:

        def load(member: str) -> dict:
            return _load_pickle(tar, f"{layout['folder']}/{member}", archive)

        train = [load(m) for m in layout["train"]]
        test = [load(m) for m in layout["test"]]
        meta = load(layout["meta"])
    train_x, train_y = _images_and_labels(train, layout["labels_key"])
    test_x, test_y = _images_and_labels(test, layout["labels_key"])
    save_prepared(
        out,
        train_x=train_x,
        train_y=train_y,
        test_x=test_x,
        test_y=test_y,
        classes=[n.decode("utf-8") for n in meta[layout["names_key"]]],
        name=name,
        source=f"{SOURCES[name]['url']} (md5 {SOURCES[name]['md5']})",
    )


def _load_pickle(tar: tarfile.TarFile, member: str, archive: str | Path) -> dict:
    try:
        f = tar.extractfile(member)
    except KeyError:
        raise ValueError(f"{archive}: no {member} inside; is it the CIFAR python archive?") from None
    # encoding="bytes": the batches are Python 2 pickles, whose str keys and raw image bytes
    # must stay bytes. Unpickling is safe enough here: the archive's md5 was checked by fetch.
    with f:
        return pickle.load(f, encoding="bytes")


def _images_and_labels(batches: list[dict], labels_key: bytes) -> tuple[torch.Tensor, torch.Tensor]:
    data = np.concatenate([np.asarray(b[b"data"], dtype=np.uint8) for b in batches])
    labels = np.concatenate([np.asarray(b[labels_key], dtype=np.int64) for b in batches])
    return torch.from_numpy(data.reshape(-1, 3, 32, 32)), torch.from_numpy(labels)


__all__ = ["LAYOUT", "SOURCES", "prepare_cifar"]
